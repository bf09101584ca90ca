package proxyconf

import (
	"encoding/json"
	"fmt"
)

// The EC2 backend delivers a proxy's configuration as SSM parameters under one prefix, which the guest reads
// with its instance role at boot and watches afterwards. What may be read by whoever may read the instance's
// parameters is apart from what must stay secret: the secrets parameter is a SecureString (encrypted with
// KMS), the others are Strings.
const (
	// AWSParameterPrefix is the path every proxy's parameters are under: AWSParameterPrefix + name + "/".
	AWSParameterPrefix = "/egress-proxy/"
	// AWSParameterConfig holds AWSConfig as JSON: squid.conf, the nftables backstop, the certificate chain.
	AWSParameterConfig = "config"
	// AWSParameterSecrets holds AWSSecrets as JSON: the htpasswd file and the TLS private key.
	AWSParameterSecrets = "secrets"
	// AWSParameterApplied is written by the guest: the config id it has applied.
	AWSParameterApplied = "applied"
	// AWSParameterSettings holds what Get reads back: the settings without secrets, as the backend stores them.
	AWSParameterSettings = "settings"
)

// AWSParameterPath is the full name of one of a proxy's parameters.
func AWSParameterPath(proxyName, parameter string) string {
	return AWSParameterPrefix + proxyName + "/" + parameter
}

// AWSConfig is the config parameter's value. ConfigID covers it and AWSSecrets together (ConfigID), so the
// guest reports as applied exactly the pair it was given.
type AWSConfig struct {
	ConfigID  string `json:"config_id"`
	SquidConf string `json:"squid_conf"`
	Backstop  string `json:"backstop"`
	TLSCert   string `json:"tls_cert,omitempty"`
}

// AWSSecrets is the secrets parameter's value; both empty when the proxy has neither auth nor TLS.
type AWSSecrets struct {
	Htpasswd string `json:"htpasswd,omitempty"`
	TLSKey   string `json:"tls_key,omitempty"`
}

// RenderAWSParameters renders s into the config and secrets parameters' values.
func RenderAWSParameters(s Settings) (config, secrets []byte, configID string, err error) {
	squid, err := RenderSquidConf(s, VMRenderOptions())
	if err != nil {
		return nil, nil, "", err
	}
	backstop, err := RenderNftables(s)
	if err != nil {
		return nil, nil, "", err
	}
	var htpasswd, cert, key []byte
	if s.Auth != nil {
		if htpasswd, err = RenderHtpasswd(*s.Auth); err != nil {
			return nil, nil, "", err
		}
	}
	if s.TLS != nil {
		cert, key = []byte(s.TLS.CertificatePEM), []byte(s.TLS.PrivateKeyPEM)
	}
	configID = ConfigID(squid, htpasswd, cert, key, backstop)
	config, err = json.Marshal(AWSConfig{ConfigID: configID, SquidConf: string(squid), Backstop: string(backstop), TLSCert: string(cert)})
	if err != nil {
		return nil, nil, "", fmt.Errorf("encoding the config parameter: %w", err)
	}
	secrets, err = json.Marshal(AWSSecrets{Htpasswd: string(htpasswd), TLSKey: string(key)})
	if err != nil {
		return nil, nil, "", fmt.Errorf("encoding the secrets parameter: %w", err)
	}
	return config, secrets, configID, nil
}

// AWSUserDataOptions are what the EC2 user-data needs to find a proxy's parameters: nothing secret, since
// whoever may call ec2:DescribeInstanceAttribute may read user-data. RenderAWSUserData (awsguest.go) renders
// the user-data from them.
type AWSUserDataOptions struct {
	// Region is the region of the SSM endpoint the guest calls.
	Region string
	// ParameterPrefix is AWSParameterPath(name, ""): the guest reads and watches AWSParameterConfig and
	// AWSParameterSecrets under it, and writes AWSParameterApplied.
	ParameterPrefix string
	// SSMEndpoint overrides https://ssm.<Region>.amazonaws.com (tests, private endpoints); empty for the default.
	SSMEndpoint string
}
