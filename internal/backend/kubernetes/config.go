package kubernetes

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Config is the kubernetes backend's provider-level configuration: the clusters proxies may run on and the
// defaults a placement falls back to.
type Config struct {
	// Clusters maps the name used in placements and ProviderIDs (kubernetes/<cluster>/...) to how to reach it.
	// Empty means one cluster named DefaultClusterName from the kubeconfig the environment names.
	Clusters map[string]ClusterConfig
	// Image is the default proxy image for every cluster that does not set its own; empty means DefaultImage.
	// The provider sets it to ReleaseImage of its version.
	Image string
}

// ClusterConfig is one cluster, reached the way the HashiCorp Kubernetes provider reaches it: a kubeconfig
// (ConfigPath, ConfigPaths, or KUBE_CONFIG_PATH / KUBECONFIG when neither is set) whose settings the explicit
// fields below override.
type ClusterConfig struct {
	ConfigPath    string
	ConfigPaths   []string
	ConfigContext string

	Host  string
	Token string
	// PEM data, not file names.
	ClientCertificate    string
	ClientKey            string
	ClusterCACertificate string
	// Insecure skips verifying the API server's certificate.
	Insecure bool
	// Exec runs a credential plugin (client.authentication.k8s.io) for a token or certificate.
	Exec *ExecConfig

	// Image overrides Config.Image on this cluster.
	Image string
	// Namespaces are listed one by one by ListByTag when RBAC forbids listing across the cluster.
	Namespaces []string

	// RequestsPerSecond and RequestBurst bound the requests this process sends the cluster
	// (DefaultRequestsPerSecond and DefaultRequestBurst when zero).
	RequestsPerSecond int
	RequestBurst      int
}

// ExecConfig is a client-go credential plugin.
type ExecConfig struct {
	APIVersion string
	Command    string
	Args       []string
	Env        map[string]string
}

// Built-in defaults.
const (
	DefaultClusterName = "default"
	// DefaultRequestsPerSecond and DefaultRequestBurst size the client-side rate limit of one provider process
	// per cluster. client-go's own defaults (5 per second, bursts of 10) are a controller's, shared here by
	// every proxy Terraform works on at once: at its default parallelism of 10, creates send about ten
	// requests each in their first second and deletes about fourteen in half a second, so lower limits made
	// applies and destroys wait on the client, not the cluster (scripts/bench-k8s.sh: a destroy of 30 proxies
	// took 5.6 s at 50 per second, 4.5 s at 200). The API server protects itself (API Priority and Fairness):
	// when a priority level is full it answers 429 with Retry-After, which the client honours, waiting that
	// long and retrying up to ten times.
	DefaultRequestsPerSecond = 200
	DefaultRequestBurst      = 400
	// ImageRepository is where each release publishes the proxy image, scripts/build-k8s-image.sh's image of
	// Debian's squid-openssl package for amd64 and arm64, tagged with the provider's version without its "v"
	// (.github/workflows/release.yml): a release's proxies run ReleaseImage(version).
	ImageRepository = "ghcr.io/egress-proxies/squid"
	// DefaultImage is the image of a provider that knows no release it was built from (see ReleaseImage): the
	// image `make k8s-image` builds from the same tree, under the local name it is imported as. No registry
	// serves that name: a cluster has it only where it was imported (the test cluster), elsewhere a proxy
	// needs `image` (the tree's image pushed to a registry, or a release's).
	DefaultImage = "localhost/egress-proxies/squid:dev"
	// DefaultReplicas is how many proxy pods run unless the placement says otherwise.
	DefaultReplicas = 1
	// DefaultServiceType exposes the proxy inside the cluster only.
	DefaultServiceType = "ClusterIP"
	// DefaultNetworkPolicy: only the allowed client ranges reach the proxy port, and the proxy pods reach DNS and
	// nothing Squid would refuse (where the cluster enforces NetworkPolicy).
	DefaultNetworkPolicy = true
	// kubeConfigPathEnv is the HashiCorp provider's variable; KUBECONFIG is kubectl's, a list of paths.
	kubeConfigPathEnv = "KUBE_CONFIG_PATH"
)

// releaseVersion is a release's version as the release build sets it (the tag without its "v"; the "v" is
// accepted too), pre-releases included. Build metadata (+...) is not: it cannot be part of an image tag.
var releaseVersion = regexp.MustCompile(`^v?([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?)$`)

// pseudoVersion is the version Go records for a build between releases: vX.Y.(Z+1)-0.TIME-COMMIT after vX.Y.Z,
// vX.Y.Z-PRE.0.TIME-COMMIT after vX.Y.Z-PRE, and vX.0.0-TIME-COMMIT when no release precedes it.
var pseudoVersion = regexp.MustCompile(`^v([0-9]+\.[0-9]+\.)([0-9]+)-(?:(.+)\.0\.|(0\.))?[0-9]{14}-[0-9a-f]{12}$`)

// ReleaseImage is the image of the release a provider of this version belongs to, or "" when it knows none
// (then DefaultImage applies). version is main.version, which the release's link flags set: a release
// ("0.3.0", "0.3.0-rc.1") runs the image published with it. A build without those flags ("dev", or "") runs
// the image of the release Go recorded it was built from: `go install ...@v0.3.0` records v0.3.0, and `go
// build` in a clone (unless -buildvcs=false) the nearest tag below it as a pseudo-version, a build after
// v0.3.0. Its proxy configuration is then that release's or a later commit's, which the release's Squid runs.
// A build that recorded no release (no tag yet, a test binary, "test") gets "": not a guess at a tag that may
// not exist, but DefaultImage, the image built from its own tree, which a cluster has only if it was given it.
func ReleaseImage(version string) string {
	if version == "" || version == "dev" {
		if info, ok := debug.ReadBuildInfo(); ok {
			return releaseImageOf(info.Main.Version)
		}
		return ""
	}
	return releaseImageOf(version)
}

// releaseImageOf maps a version (a release's or one Go recorded) to its release's image.
func releaseImageOf(version string) string {
	// A build of a modified tree: its base is still the recorded version.
	version = strings.TrimSuffix(version, "+dirty")
	// First: a pseudo-version has a release version's shape too.
	m := pseudoVersion.FindStringSubmatch(version)
	if m == nil {
		if r := releaseVersion.FindStringSubmatch(version); r != nil {
			return ImageRepository + ":" + r[1]
		}
		return ""
	}
	switch {
	case m[3] != "": // after a pre-release: its version is all there
		return ImageRepository + ":" + m[1] + m[2] + "-" + m[3]
	case m[4] == "": // vX.0.0-TIME-COMMIT: no release before it
		return ""
	}
	patch, err := strconv.Atoi(m[2])
	if err != nil || patch == 0 { // vX.Y.0-0.TIME-COMMIT follows no release Go can name
		return ""
	}
	return ImageRepository + ":" + m[1] + strconv.Itoa(patch-1)
}

// IsDefaultImage tells whether image is one a provider defaults to: DefaultImage or a tag of ImageRepository.
// A proxy made by an earlier provider version with its default image has its release's tag.
func IsDefaultImage(image string) bool {
	tag, ok := strings.CutPrefix(image, ImageRepository+":")
	return image == DefaultImage || ok && imageTagRE.MatchString(tag)
}

// ServiceTypes are the accepted Service types, for validators and documentation.
var ServiceTypes = []string{"ClusterIP", "NodePort", "LoadBalancer"}

// ClusterNames lists, sorted, the cluster names placements may use: the configured ones, or the default.
func (c Config) ClusterNames() []string {
	names := make([]string, 0, len(c.Clusters))
	for n := range c.clusters() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// clusters returns the configured clusters, or the default one.
func (c Config) clusters() map[string]ClusterConfig {
	if len(c.Clusters) > 0 {
		return c.Clusters
	}
	return map[string]ClusterConfig{DefaultClusterName: {}}
}

// image is the image a cluster runs proxies with unless the placement names one.
func (c Config) image(cluster ClusterConfig) string {
	switch {
	case cluster.Image != "":
		return cluster.Image
	case c.Image != "":
		return c.Image
	}
	return DefaultImage
}

// kubeconfigPaths are the files the kubeconfig is merged from: the explicit ones first, then the environment.
func (cc ClusterConfig) kubeconfigPaths() []string {
	var paths []string
	if cc.ConfigPath != "" {
		paths = append(paths, cc.ConfigPath)
	}
	paths = append(paths, cc.ConfigPaths...)
	if len(paths) == 0 {
		for _, env := range []string{kubeConfigPathEnv, clientcmd.RecommendedConfigPathEnvVar} {
			if v := os.Getenv(env); v != "" {
				paths = filepath.SplitList(v)
				break
			}
		}
	}
	out := paths[:0]
	for _, p := range paths {
		if p == "" {
			continue
		}
		out = append(out, expandHome(p))
	}
	return out
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
	}
	return p
}

// restConfig builds the client configuration of one cluster. It reads files, never the network, so it can
// run on every use and pick up rotated credentials.
func (cc ClusterConfig) restConfig() (*rest.Config, error) {
	overrides := &clientcmd.ConfigOverrides{CurrentContext: cc.ConfigContext}
	if cc.Host != "" {
		overrides.ClusterInfo.Server = cc.Host
	}
	if cc.ClusterCACertificate != "" {
		overrides.ClusterInfo.CertificateAuthorityData = []byte(cc.ClusterCACertificate)
	}
	if cc.Insecure {
		overrides.ClusterInfo.InsecureSkipTLSVerify = true
	}
	if cc.Token != "" {
		overrides.AuthInfo.Token = cc.Token
	}
	if cc.ClientCertificate != "" {
		overrides.AuthInfo.ClientCertificateData = []byte(cc.ClientCertificate)
	}
	if cc.ClientKey != "" {
		overrides.AuthInfo.ClientKeyData = []byte(cc.ClientKey)
	}
	if cc.Exec != nil {
		overrides.AuthInfo.Exec = &clientcmdapi.ExecConfig{
			APIVersion: cc.Exec.APIVersion, Command: cc.Exec.Command, Args: cc.Exec.Args,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}
		keys := make([]string, 0, len(cc.Exec.Env))
		for k := range cc.Exec.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			overrides.AuthInfo.Exec.Env = append(overrides.AuthInfo.Exec.Env, clientcmdapi.ExecEnvVar{Name: k, Value: cc.Exec.Env[k]})
		}
	}

	paths := cc.kubeconfigPaths()
	if len(paths) == 0 {
		if cc.Host == "" {
			return nil, fmt.Errorf("no kubeconfig and no host: set config_path, %s or KUBECONFIG, or host with credentials", kubeConfigPathEnv)
		}
		// Everything comes from the explicit settings.
		cfg, err := clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), overrides).ClientConfig()
		if err != nil {
			return nil, err
		}
		return cc.withRateLimit(withUserAgent(cfg)), nil
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", p, err)
		}
	}
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: paths}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", strings.Join(paths, ", "), err)
	}
	return cc.withRateLimit(withUserAgent(cfg)), nil
}

func withUserAgent(cfg *rest.Config) *rest.Config {
	cfg.UserAgent = "terraform-provider-egress"
	return cfg
}

// withRateLimit sets the client-side rate limit of the cluster's clients (see DefaultRequestsPerSecond).
func (cc ClusterConfig) withRateLimit(cfg *rest.Config) *rest.Config {
	cfg.QPS, cfg.Burst = float32(DefaultRequestsPerSecond), DefaultRequestBurst
	if cc.RequestsPerSecond > 0 {
		cfg.QPS = float32(cc.RequestsPerSecond)
	}
	if cc.RequestBurst > 0 {
		cfg.Burst = cc.RequestBurst
	}
	return cfg
}

// validate checks what can be checked without the network.
func (c Config) validate() error {
	for name, cc := range c.clusters() {
		if cc.ClientCertificate != "" && cc.ClientKey == "" || cc.ClientKey != "" && cc.ClientCertificate == "" {
			return fmt.Errorf("cluster %q: client_certificate and client_key go together", name)
		}
		if cc.Insecure && cc.ClusterCACertificate != "" {
			return fmt.Errorf("cluster %q: %w", name, ErrInsecureWithCA)
		}
		if err := ValidateImage(c.image(cc)); err != nil {
			return fmt.Errorf("cluster %q: %w", name, err)
		}
		if cc.Exec != nil && cc.Exec.Command == "" {
			return fmt.Errorf("cluster %q: exec needs a command", name)
		}
		if cc.RequestsPerSecond < 0 || cc.RequestBurst < 0 {
			return fmt.Errorf("cluster %q: requests_per_second and request_burst must be positive", name)
		}
	}
	return nil
}
