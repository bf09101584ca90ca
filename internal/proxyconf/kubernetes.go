package proxyconf

// Where the Kubernetes backend mounts the proxy's ConfigMap and Secret in the Squid container, and the keys
// it stores the files under.
const (
	KubernetesConfigDir  = "/etc/squid-egress"
	KubernetesSecretDir  = "/etc/squid-egress-auth"
	KubernetesConfigKey  = "squid.conf"
	KubernetesSecretKey  = "passwd"
	KubernetesTLSCertKey = "tls.crt"
	KubernetesTLSKeyKey  = "tls.key"
	KubernetesSquidPath  = "/usr/sbin/squid"
	// KubernetesTerminationLog is the container's termination message file, and Squid's cache log: what a
	// crash's diagnostic quotes is Squid's own account, never an access-log line.
	KubernetesTerminationLog = "/dev/termination-log"
	// KubernetesOwnAddressesPath lists the pod's own addresses, one a line, for the destination guard
	// (RenderOptions.OwnAddressesFile). The start command writes it before Squid starts, from the addresses the
	// downward API puts in KubernetesPodIPsEnv: no one knows a pod's address before the pod exists. It lies in
	// Squid's run folder, an emptyDir the backend mounts, since the root filesystem is read-only.
	KubernetesOwnAddressesPath = "/var/run/squid/egress-own-addresses"
	// KubernetesPodIPsEnv holds the pod's addresses, comma-separated (the downward API's status.podIPs, one
	// per IP family), and KubernetesPodIPEnv its primary one (status.podIP), read where the first is empty.
	KubernetesPodIPsEnv  = "POD_IPS"
	KubernetesPodIPEnv   = "POD_IP"
	kubernetesConfigPath = KubernetesConfigDir + "/" + KubernetesConfigKey
)

// kubernetesStartScript starts Squid in the foreground with logs on the container's stdout and stderr, where
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
func kubernetesStartScript(ownFile string) string {
	return `own='` + ownFile + `'; ` +
		`(IFS=,; for a in ${` + KubernetesPodIPsEnv + `:-$` + KubernetesPodIPEnv + `}; do [ -z "$a" ] || echo "$a"; done) >"$own" || exit 1; ` +
		`if [ ! -s "$own" ]; then echo "egress-proxy: the pod's own address is unknown (` + KubernetesPodIPsEnv + ` and ` + KubernetesPodIPEnv +
		` are empty): not starting Squid without its own-address guard" >&2; exit 1; fi; ` +
		`chown proxy /proc/self/fd/1 /proc/self/fd/2 2>/dev/null; exec ` + KubernetesSquidPath + ` -N -d 1 -f "$1"`
}

// Kubernetes is the proxy in the shape the Kubernetes backend turns into objects: plain data, so this package
// stays free of client-go.
type Kubernetes struct {
	// ConfigMapData is the ConfigMap's data, mounted at KubernetesConfigDir.
	ConfigMapData map[string]string
	// SecretData is the Secret's data, mounted at KubernetesSecretDir: the htpasswd file and the TLS
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

// RenderKubernetes renders the proxy for a Squid container image such as ubuntu/squid, which has /bin/sh,
// chown and Squid at KubernetesSquidPath. Options left empty take the container's values: the access log on
// stdout, the cache log in the termination message file and on stderr, no pid file (nothing signals Squid by
// pid in a pod), htpasswd from the Secret mount, the own-address list at KubernetesOwnAddressesPath.
func RenderKubernetes(s Settings, opts RenderOptions) (Kubernetes, error) {
	if opts.AccessLog == "" {
		opts.AccessLog = "stdio:/dev/stdout"
	}
	if opts.CacheLog == "" {
		opts.CacheLog = KubernetesTerminationLog
	}
	if opts.PidFile == "" {
		opts.PidFile = "none"
	}
	if opts.HtpasswdPath == "" {
		opts.HtpasswdPath = KubernetesSecretDir + "/" + KubernetesSecretKey
	}
	if opts.TLSCertPath == "" {
		opts.TLSCertPath = KubernetesSecretDir + "/" + KubernetesTLSCertKey
	}
	if opts.TLSKeyPath == "" {
		opts.TLSKeyPath = KubernetesSecretDir + "/" + KubernetesTLSKeyKey
	}
	if opts.OwnAddressesFile == "" {
		opts.OwnAddressesFile = KubernetesOwnAddressesPath
	}
	opts = opts.WithDefaults()
	conf, err := RenderSquidConf(s, opts)
	if err != nil {
		return Kubernetes{}, err
	}
	k := Kubernetes{
		ConfigMapData: map[string]string{KubernetesConfigKey: string(conf)},
		Command:       []string{"/bin/sh", "-c", kubernetesStartScript(opts.OwnAddressesFile), "egress-proxy"},
		Args:          []string{kubernetesConfigPath},
		FieldEnv: []FieldEnv{
			{Name: KubernetesPodIPsEnv, FieldPath: "status.podIPs"},
			{Name: KubernetesPodIPEnv, FieldPath: "status.podIP"},
		},
		// The kubelet makes this file writable by any user, also on a read-only root filesystem.
		TerminationMessagePath: opts.CacheLog,
		ProxyPort:              s.Port,
		Readiness:              HTTPProbe{Port: opts.HealthPort, Path: HealthPath},
	}
	if s.Auth != nil {
		htpasswd, err := RenderHtpasswd(*s.Auth)
		if err != nil {
			return Kubernetes{}, err
		}
		k.SecretData = map[string][]byte{KubernetesSecretKey: htpasswd}
	}
	if s.TLS != nil {
		if k.SecretData == nil {
			k.SecretData = map[string][]byte{}
		}
		k.SecretData[KubernetesTLSCertKey] = []byte(s.TLS.CertificatePEM)
		k.SecretData[KubernetesTLSKeyKey] = []byte(s.TLS.PrivateKeyPEM)
	}
	return k, nil
}
