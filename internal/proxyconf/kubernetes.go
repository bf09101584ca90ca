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
	kubernetesConfigPath     = KubernetesConfigDir + "/" + KubernetesConfigKey
)

// kubernetesStartScript starts Squid in the foreground with logs on the container's stdout and stderr, where
// kubectl logs finds them. Squid opens its logs after dropping from root to the proxy user, and the
// container's stdout and stderr are pipes only root may open again through /dev/stdout; handing the pipes to
// proxy first is what lets it log there. If the container already runs as a non-root user, chown fails
// harmlessly and Squid, which then cannot change user, opens the pipes as their owner.
// -d 1 copies the cache log, which goes to the termination message file, to stderr as well.
const kubernetesStartScript = `chown proxy /proc/self/fd/1 /proc/self/fd/2 2>/dev/null; exec ` + KubernetesSquidPath + ` -N -d 1 -f "$1"`

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
	// ProxyPort is the container port clients use; the Service exposes it.
	ProxyPort int
	// Readiness is an HTTP GET probe expecting 200.
	Readiness HTTPProbe
}

// HTTPProbe is an HTTP GET readiness check.
type HTTPProbe struct {
	Port int
	Path string
}

// RenderKubernetes renders the proxy for a Squid container image such as ubuntu/squid, which has /bin/sh,
// chown and Squid at KubernetesSquidPath. Options left empty take the container's values: the access log on
// stdout, the cache log in the termination message file and on stderr, no pid file (nothing signals Squid by
// pid in a pod), htpasswd from the Secret mount.
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
	opts = opts.withDefaults()
	conf, err := RenderSquidConf(s, opts)
	if err != nil {
		return Kubernetes{}, err
	}
	k := Kubernetes{
		ConfigMapData: map[string]string{KubernetesConfigKey: string(conf)},
		Command:       []string{"/bin/sh", "-c", kubernetesStartScript, "egress-proxy"},
		Args:          []string{kubernetesConfigPath},
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
