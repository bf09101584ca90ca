// Package guest is the kubernetes backend's guest side: the pod's squid.conf and the container's start command,
// rendered as plain data (Pod) that the backend (internal/backend/kubernetes) turns into a ConfigMap, a Secret
// and a Deployment. It imports no backend and no client-go.
package guest

import "github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"

// Where the Kubernetes backend mounts the proxy's ConfigMap and Secret in the Squid container, and the keys
// it stores the files under.
const (
	ConfigDir  = "/etc/squid-egress"
	SecretDir  = "/etc/squid-egress-auth"
	ConfigKey  = "squid.conf"
	SecretKey  = "passwd"
	TLSCertKey = "tls.crt"
	TLSKeyKey  = "tls.key"
	// ClientCAKey and ClientCRLKey hold the client CA and its CRL in the ConfigMap (not secrets), so that
	// the backend reads back what the pods enforce.
	ClientCAKey  = "client-ca.crt"
	ClientCRLKey = "client-ca.crl"
	SquidPath    = "/usr/sbin/squid"
	// TerminationLog is the container's termination message file, and Squid's cache log: what a
	// crash's diagnostic quotes is Squid's own account, never an access-log line.
	TerminationLog = "/dev/termination-log"
	// OwnAddressesPath lists the pod's own addresses, one a line, for the destination guard
	// (proxyconf.RenderOptions.OwnAddressesFile). The start command writes it before Squid starts, from the addresses the
	// downward API puts in PodIPsEnv: no one knows a pod's address before the pod exists. It lies in
	// Squid's run folder, an emptyDir the backend mounts, since the root filesystem is read-only.
	OwnAddressesPath = "/var/run/squid/egress-own-addresses"
	// PodIPsEnv holds the pod's addresses, comma-separated (the downward API's status.podIPs, one
	// per IP family), and PodIPEnv its primary one (status.podIP), read where the first is empty.
	PodIPsEnv  = "POD_IPS"
	PodIPEnv   = "POD_IP"
	configPath = ConfigDir + "/" + ConfigKey
)

// startScript starts Squid in the foreground with logs on the container's stdout and stderr, where
// kubectl logs finds them. Squid opens its logs after dropping from root to the proxy user, and the
// container's stdout and stderr are pipes only root may open again through /dev/stdout; handing the pipes to
// proxy first is what lets it log there. If the container already runs as a non-root user, chown fails
// harmlessly and Squid, which then cannot change user, opens the pipes as their owner.
// -d 1 copies the cache log, which goes to the termination message file, to stderr as well.
//
// Before that it lists the pod's own addresses in ownFile, one a line, for squid.conf's own-address guard. A
// pod without them (a template from before the downward API variables) does not start: the guard would be
// an empty list, and Squid would forward to the pod itself. The message goes to stderr, which the kubelet
// quotes as the termination message when the cache log is empty. ownFile is validated to hold no quote.
func startScript(ownFile string) string {
	return `own='` + ownFile + `'; ` +
		`(IFS=,; for a in ${` + PodIPsEnv + `:-$` + PodIPEnv + `}; do [ -z "$a" ] || echo "$a"; done) >"$own" || exit 1; ` +
		`if [ ! -s "$own" ]; then echo "egress-proxy: the pod's own address is unknown (` + PodIPsEnv + ` and ` + PodIPEnv +
		` are empty): not starting Squid without its own-address guard" >&2; exit 1; fi; ` +
		`chown proxy /proc/self/fd/1 /proc/self/fd/2 2>/dev/null; exec ` + SquidPath + ` -N -d 1 -f "$1"`
}

// Pod is the proxy in the shape the Kubernetes backend turns into objects: plain data, so this package stays
// free of client-go.
type Pod struct {
	// ConfigMapData is the ConfigMap's data, mounted at ConfigDir.
	ConfigMapData map[string]string
	// SecretData is the Secret's data, mounted at SecretDir: the htpasswd file and the TLS
	// certificate and key; nil when neither authentication nor TLS is set, and then no Secret is needed.
	SecretData map[string][]byte
	// Command and Args are the container's command and arguments; Args is the path of squid.conf.
	Command []string
	Args    []string
	// TerminationMessagePath is the container's termination message file: Squid's cache log.
	TerminationMessagePath string
	// FieldEnv are the environment variables the container gets from the downward API: the pod's own
	// addresses, which the start command lists for the destination guard.
	FieldEnv []FieldEnv
	// ProxyPort is the container port clients use; the Service exposes it.
	ProxyPort int
	// Readiness is an HTTP GET probe expecting 200.
	Readiness HTTPProbe
	// Metrics are the metrics sidecars (metrics.go); nil without metrics.
	Metrics *Metrics
}

// FieldEnv is an environment variable whose value the kubelet takes from a field of the pod (FieldPath, such
// as status.podIP).
type FieldEnv struct {
	Name      string
	FieldPath string
}

// HTTPProbe is an HTTP GET readiness check.
type HTTPProbe struct {
	Port int
	Path string
}

// RenderPod renders the proxy for a Squid container image such as ubuntu/squid, which has /bin/sh,
// chown and Squid at SquidPath. Options left empty take the container's values: the access log on
// stdout, the cache log in the termination message file and on stderr, no pid file (nothing signals Squid by
// pid in a pod), htpasswd from the Secret mount, the own-address list at OwnAddressesPath.
func RenderPod(s proxyconf.Settings, opts proxyconf.RenderOptions) (Pod, error) {
	if opts.AccessLog == "" {
		opts.AccessLog = "stdio:/dev/stdout"
	}
	if opts.CacheLog == "" {
		opts.CacheLog = TerminationLog
	}
	if opts.PidFile == "" {
		opts.PidFile = "none"
	}
	if opts.HtpasswdPath == "" {
		opts.HtpasswdPath = SecretDir + "/" + SecretKey
	}
	if opts.TLSCertPath == "" {
		opts.TLSCertPath = SecretDir + "/" + TLSCertKey
	}
	if opts.TLSKeyPath == "" {
		opts.TLSKeyPath = SecretDir + "/" + TLSKeyKey
	}
	if opts.ClientCAPath == "" {
		opts.ClientCAPath = ConfigDir + "/" + ClientCAKey
	}
	if opts.ClientCRLPath == "" {
		opts.ClientCRLPath = ConfigDir + "/" + ClientCRLKey
	}
	if opts.OwnAddressesFile == "" {
		opts.OwnAddressesFile = OwnAddressesPath
	}
	if s.Metrics != nil && opts.ManagerPort == 0 {
		opts.ManagerPort = proxyconf.DefaultManagerPort
	}
	opts = opts.WithDefaults()
	conf, err := proxyconf.RenderSquidConf(s, opts)
	if err != nil {
		return Pod{}, err
	}
	k := Pod{
		ConfigMapData: map[string]string{ConfigKey: string(conf)},
		Command:       []string{"/bin/sh", "-c", startScript(opts.OwnAddressesFile), "egress-proxy"},
		Args:          []string{configPath},
		FieldEnv: []FieldEnv{
			{Name: PodIPsEnv, FieldPath: "status.podIPs"},
			{Name: PodIPEnv, FieldPath: "status.podIP"},
		},
		// The kubelet makes this file writable by any user, also on a read-only root filesystem.
		TerminationMessagePath: opts.CacheLog,
		ProxyPort:              s.Port,
		Readiness:              HTTPProbe{Port: opts.HealthPort, Path: proxyconf.HealthPath},
	}
	if err := renderMetrics(&k, s, opts); err != nil {
		return Pod{}, err
	}
	if len(s.Users) > 0 {
		htpasswd, err := proxyconf.RenderHtpasswd(s.Users)
		if err != nil {
			return Pod{}, err
		}
		k.SecretData = map[string][]byte{SecretKey: htpasswd}
	}
	if s.TLS != nil {
		if k.SecretData == nil {
			k.SecretData = map[string][]byte{}
		}
		k.SecretData[TLSCertKey] = []byte(s.TLS.CertificatePEM)
		k.SecretData[TLSKeyKey] = []byte(s.TLS.PrivateKeyPEM)
		if s.TLS.ClientCAPEM != "" {
			k.ConfigMapData[ClientCAKey] = s.TLS.ClientCAPEM
		}
		if s.TLS.ClientCRLPEM != "" {
			k.ConfigMapData[ClientCRLKey] = s.TLS.ClientCRLPEM
		}
	}
	return k, nil
}
