package guest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// The EC2 backend delivers a proxy's configuration as SSM parameters under one prefix, which the guest reads
// with its instance role at boot and watches afterwards. What may be read by whoever may read the instance's
// parameters is apart from what must stay secret: the secrets parameter is a SecureString (encrypted with
// KMS), the others are Strings.
const (
	// ParameterPrefix is the path every proxy's parameters are under: ParameterPrefix + name + "/".
	ParameterPrefix = "/egress-proxy/"
	// ParameterConfig holds the config's Manifest, and its parts (PartName) the config packed: squid.conf,
	// the nftables backstop, the certificate chain (packed.go). Proxies launched before configs were packed
	// keep the whole Config in it, as JSON (FormatWhole).
	ParameterConfig = "config"
	// ParameterSecrets holds Secrets as JSON: the htpasswd file and the TLS private key.
	ParameterSecrets = "secrets"
	// ParameterApplied is written by the guest: the config id it has applied.
	ParameterApplied = "applied"
	// ParameterSettings holds what Get reads back: the settings without secrets, as the backend stores them,
	// packed in its parts behind a PackedHead.
	ParameterSettings = "settings"
)

// Applied is the applied parameter's value, as the guest writes it: the config id it runs, alone when
// nothing else is to say (the form of earlier guests), and as JSON when it refused a newer config, with the
// config id refused and why, so that whoever waits for that config learns at once that it will not come.
type Applied struct {
	ConfigID string `json:"config_id"`
	Refused  string `json:"refused,omitempty"`
	// RefusedMAC is the start of the refused config's MAC (RefusedMAC): a config written again with the
	// same id, under a new key, is another attempt, which an earlier refusal does not answer.
	RefusedMAC string `json:"refused_mac,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// RefusedMAC is what Applied.RefusedMAC holds of a config's MAC.
func RefusedMAC(mac string) string { return mac[:min(16, len(mac))] }

// ParseApplied reads the applied parameter's value.
func ParseApplied(value string) Applied {
	var a Applied
	if json.Unmarshal([]byte(value), &a) != nil {
		return Applied{ConfigID: value}
	}
	return a
}

// String is the applied parameter's value for a: the config id alone when nothing was refused. SSM takes
// no empty value, so a guest that refused its first config writes "-" as the id it runs.
func (a Applied) String() string {
	if a.Refused == "" {
		return a.ConfigID
	}
	if a.ConfigID == "" {
		a.ConfigID = "-"
	}
	b, _ := json.Marshal(a) // strings only: never fails
	return string(b)
}

// ParameterPath is the full name of one of a proxy's parameters.
func ParameterPath(proxyName, parameter string) string {
	return ParameterPrefix + proxyName + "/" + parameter
}

// Config is the config parameter's value. ConfigID covers it and Secrets together (ConfigID), so the
// guest reports as applied exactly the pair it was given. MAC authenticates it (ConfigMAC) with the key
// in Secrets: the config parameter is a plain String, and whoever may write it must not thereby choose
// what runs as root on the proxy; writing a config the guest accepts also needs the secrets parameter,
// which only who may decrypt it can read.
type Config struct {
	ConfigID  string `json:"config_id"`
	SquidConf string `json:"squid_conf"`
	Backstop  string `json:"backstop"`
	TLSCert   string `json:"tls_cert,omitempty"`
	// ClientCA and ClientCRL are the client CA and its CRL (no secrets), installed where squid.conf names
	// them (proxyconf.ClientCAPath, ClientCRLPath): in the config, so that the MAC covers them as well and no
	// one who may only write the String parameters chooses whom the proxy trusts.
	ClientCA  string `json:"client_ca,omitempty"`
	ClientCRL string `json:"client_crl,omitempty"`
	// Metrics are the proxy's metrics ports (proxyconf.Settings.Metrics), absent without metrics: the agent
	// runs mtail and the Squid exporter on them, from units it writes itself. Ports alone, in the config so
	// that the MAC covers them; the ranges that may scrape them are the backstop's and the security group's.
	Metrics *MetricsPorts `json:"metrics,omitempty"`
	MAC     string        `json:"mac"`
}

// MetricsPorts are the ports mtail (egress_proxy_*) and the Squid exporter (squid_*) listen on, and the
// cache manager's on 127.0.0.1, which the exporter reads.
type MetricsPorts struct {
	Port        int `json:"port"`
	SquidPort   int `json:"squid_port"`
	ManagerPort int `json:"manager_port"`
}

// WithMetrics is the config id id (vmguest.ConfigID, WithClientCA) of a config that also carries metrics
// ports m: the ports are in no file the id covers, and the agent must apply a config whose ports moved. id
// itself without metrics, so a config without them keeps the id it had. The agent computes the same
// (with_metrics in agent.py).
func WithMetrics(id string, m *MetricsPorts) string {
	if m == nil {
		return id
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%s\nmetrics %d %d %d\n", id, m.Port, m.SquidPort, m.ManagerPort))
	return hex.EncodeToString(h[:])[:16]
}

// renderOptions are the guest's squid.conf options for settings s: with metrics, Squid's cache manager opens
// on proxyconf.DefaultManagerPort of 127.0.0.1 for the exporter, as on kvm.
func renderOptions(s proxyconf.Settings) proxyconf.RenderOptions {
	opts := vmguest.RenderOptions()
	if s.Metrics != nil {
		opts.ManagerPort = proxyconf.DefaultManagerPort
	}
	return opts
}

// Secrets is the secrets parameter's value: the htpasswd file and the TLS key (empty when the proxy has
// neither auth nor TLS), and the key that authenticates the config parameter.
type Secrets struct {
	Htpasswd  string `json:"htpasswd,omitempty"`
	TLSKey    string `json:"tls_key,omitempty"`
	ConfigKey string `json:"config_key"`
}

// ConfigKeyBytes is the length of a config key: HMAC-SHA256's block-sized keys gain nothing over its
// output size.
const ConfigKeyBytes = 32

// NewConfigKey returns a new random config key. The backend makes one per config it writes, so a config
// once replaced cannot be written back (replayed) by whoever kept a copy: its MAC is under a key the guest
// no longer holds.
func NewConfigKey() ([]byte, error) {
	k := make([]byte, ConfigKeyBytes)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("making the config key: %w", err)
	}
	return k, nil
}

// ConfigMAC is the hex HMAC-SHA256, under key, of the config's fields and the parameter prefix it was
// written for (so one proxy's config is never another's), each length-prefixed so no two configs encode
// alike. The client CA and CRL follow only when either is set, so a config without them has the MAC that
// agents launched before they were carried compute. The agent computes the same (config_mac in agent.py).
func ConfigMAC(key []byte, prefix string, c Config) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("egress-proxy config v1\n"))
	fields := []string{prefix, c.ConfigID, c.SquidConf, c.Backstop, c.TLSCert}
	if c.ClientCA != "" || c.ClientCRL != "" {
		fields = append(fields, c.ClientCA, c.ClientCRL)
	}
	// The metrics ports likewise, so a config without metrics has the MAC it had before.
	if m := c.Metrics; m != nil {
		fields = append(fields, fmt.Sprintf("metrics %d %d %d", m.Port, m.SquidPort, m.ManagerPort))
	}
	for _, f := range fields {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// RenderParameters renders s into the config and secrets parameters' values for the proxy whose
// parameters are under prefix (ParameterPath(name, "")), authenticated with key (NewConfigKey).
func RenderParameters(s proxyconf.Settings, prefix string, key []byte) (config, secrets []byte, configID string, err error) {
	if len(key) != ConfigKeyBytes {
		return nil, nil, "", fmt.Errorf("the config key has %d bytes, want %d", len(key), ConfigKeyBytes)
	}
	opts := renderOptions(s)
	squid, err := proxyconf.RenderSquidConf(s, opts)
	if err != nil {
		return nil, nil, "", err
	}
	backstop, err := proxyconf.RenderNftables(s)
	if err != nil {
		return nil, nil, "", err
	}
	var htpasswd, cert, tlsKey []byte
	var clientCA, clientCRL string
	if len(s.Users) > 0 {
		if htpasswd, err = proxyconf.RenderHtpasswd(s.Users); err != nil {
			return nil, nil, "", err
		}
	}
	if s.TLS != nil {
		cert, tlsKey = []byte(s.TLS.CertificatePEM), []byte(s.TLS.PrivateKeyPEM)
		clientCA, clientCRL = s.TLS.ClientCAPEM, s.TLS.ClientCRLPEM
	}
	// The id names the client CA and CRL as the kvm and gcp guests' do: squid.conf names them by path only,
	// so a new CA alone must still be a new config the agent applies.
	var metrics *MetricsPorts
	if s.Metrics != nil {
		port, squidPort := s.Metrics.Ports()
		metrics = &MetricsPorts{Port: port, SquidPort: squidPort, ManagerPort: opts.ManagerPort}
	}
	configID = WithMetrics(vmguest.WithClientCA(vmguest.ConfigID(squid, htpasswd, cert, tlsKey, backstop), clientCA, clientCRL), metrics)
	c := Config{ConfigID: configID, SquidConf: string(squid), Backstop: string(backstop), TLSCert: string(cert), ClientCA: clientCA, ClientCRL: clientCRL,
		Metrics: metrics}
	c.MAC = ConfigMAC(key, prefix, c)
	config, err = json.Marshal(c)
	if err != nil {
		return nil, nil, "", fmt.Errorf("encoding the config parameter: %w", err)
	}
	secrets, err = json.Marshal(Secrets{Htpasswd: string(htpasswd), TLSKey: string(tlsKey), ConfigKey: base64.StdEncoding.EncodeToString(key)})
	if err != nil {
		return nil, nil, "", fmt.Errorf("encoding the secrets parameter: %w", err)
	}
	return config, secrets, configID, nil
}

// UserDataOptions are what the EC2 user-data needs to find a proxy's parameters: nothing secret, since
// whoever may call ec2:DescribeInstanceAttribute may read user-data. RenderUserData (userdata.go) renders
// the user-data from them.
type UserDataOptions struct {
	// Region is the region of the SSM endpoint the guest calls.
	Region string
	// ParameterPrefix is ParameterPath(name, ""): the guest reads and watches ParameterConfig and
	// ParameterSecrets under it, and writes ParameterApplied.
	ParameterPrefix string
	// SSMEndpoint overrides https://ssm.<Region>.amazonaws.com (a private endpoint); empty for the default. It
	// must be HTTPS.
	SSMEndpoint string
	// Logs, when set, is where the guest sends Squid's access log in CloudWatch Logs.
	Logs *LogsTarget
}

// LogsTarget is a CloudWatch Logs stream the guest writes the access log to, one PutLogEvents per batch of
// lines, signed with the instance role's credentials; it makes the stream when it is missing.
type LogsTarget struct {
	Group, Stream string
	// Endpoint overrides https://logs.<Region>.amazonaws.com; empty for the default. It must be HTTPS.
	Endpoint string
}
