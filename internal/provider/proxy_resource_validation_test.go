package provider

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// Every invalid configuration is rejected at plan time, and OpenTofu points at the attribute at fault: the
// quoted source line in its diagnostic is the attribute's own line.
func TestAccProxy_invalidConfigRejectedAtPlan(t *testing.T) {
	const base = "  allowed_client_cidrs = [\"10.0.0.0/8\"]\n"
	// A good pair, so that the key pair's own check passes and the attribute combination is what fails.
	goodCert, goodKey := testutil.SelfSignedPEM(t, "proxy.test")
	goodSHA := strings.Repeat("0123456789abcdef", 4)
	// The backends' attributes, as ExactlyOneOf lists them: in the order of the descriptor table.
	names := make([]string, 0, len(backendDescriptors))
	for _, k := range backendKinds() {
		names = append(names, string(k))
	}
	allKinds := strings.Join(names, ",")
	k8s := func(extra string) string { return "  kubernetes = { namespace = \"ns\", " + extra + " }" }
	goodTLS := func(keys string) string {
		return base + "  kvm = {}\n  tls = { certificate_pem = " + strconv.Quote(goodCert) + ", " + fmt.Sprintf(keys, strconv.Quote(goodKey)) + " }"
	}
	tests := map[string]refusedConfig{
		"no backend":                  {base, `Missing Attribute Configuration.*Exactly one of these attributes must be configured: \[` + allKinds + `\]`},
		"two backends":                {base + "  kvm = {}\n  gcp = { project = \"p\", zone = \"europe-west1-b\" }", `Invalid Attribute Combination.*Exactly one of these attributes must be configured: \[` + allKinds + `\]`},
		"uppercase name":              {base + "  kvm = {}\n  name = \"Proxy1\"", `Invalid proxy name.*Attribute name: "Proxy1"`},
		"name too long":               {base + "  kvm = {}\n  name = \"a" + strings.Repeat("b", 63) + "\"", `Invalid proxy name.*Attribute name: "abbb`},
		"name starts with digit":      {base + "  kvm = {}\n  name = \"1proxy\"", `Invalid proxy name.*Attribute name: "1proxy"`},
		"port zero":                   {base + "  kvm = {}\n  port = 0", `Invalid port.*Attribute port: port 0`},
		"port too high":               {base + "  kvm = {}\n  port = 70000", `Invalid port.*Attribute port: port 70000`},
		"port of the health check":    {base + "  kvm = {}\n  port = 3129", `Invalid Attribute Value Match.*Attribute port value must be none of: \["3129"\], got: 3129`},
		"no client cidrs":             {"  kvm = {}\n  allowed_client_cidrs = []", `Invalid Attribute Value.*Attribute allowed_client_cidrs set must contain at least 1`},
		"cidr with host bits":         {"  kvm = {}\n  allowed_client_cidrs = [\"10.0.0.1/8\"]", `Invalid client CIDR.*Attribute allowed_client_cidrs\[Value\("10.0.0.1/8"\)\]:.*write 10.0.0.0/8`},
		"cidr not a cidr":             {"  kvm = {}\n  allowed_client_cidrs = [\"everyone\"]", `Invalid client CIDR.*Attribute allowed_client_cidrs\[Value\("everyone"\)\]`},
		"destination with space":      {base + "  kvm = {}\n  allowed_destinations = [\"a.com deny\"]", `Invalid destination.*Attribute allowed_destinations\[Value\("a.com deny"\)\]`},
		"destination with newline":    {base + "  kvm = {}\n  allowed_destinations = [\"a.com\\nhttp_access allow all\"]", `Invalid destination.*Attribute allowed_destinations\[`},
		"destination with wildcard":   {base + "  kvm = {}\n  allowed_destinations = [\"*.example.com\"]", `Invalid destination.*Attribute allowed_destinations\[Value\("\*.example.com"\)\]`},
		"destination uppercase":       {base + "  kvm = {}\n  allowed_destinations = [\"API.example.com\"]", `Invalid destination.*Attribute allowed_destinations\[Value\("API.example.com"\)\]: destination "API.example.com" must be lowercase`},
		"connect port zero":           {base + "  kvm = {}\n  allowed_ports = [0]", `Invalid port.*Attribute allowed_ports\[Value\(0\)\]`},
		"reserved label key":          {base + "  kvm = {}\n  labels = { egress-uid = \"x\" }", `Invalid label key.*Attribute labels\["egress-uid"\]: label key "egress-uid" is reserved`},
		"label value uppercase":       {base + "  kvm = {}\n  labels = { team = \"Net\" }", `Invalid label value.*Attribute labels\["team"\]`},
		"label key with dot":          {base + "  kvm = {}\n  labels = { \"a.b\" = \"x\" }", `Invalid label key.*Attribute labels\["a.b"\]: label key "a.b"`},
		"auth without password":       {base + "  kvm = {}\n  auth = { username = \"u\" }", `Invalid Attribute Combination.*At least one attribute out of \[[a-z_.,]*auth.password_wo[a-z_.,]*\] must be specified`},
		"auth short password":         {base + "  kvm = {}\n  auth = { username = \"u\", password = \"short\" }", `Invalid password.*Attribute auth.password: password must be 8 to 72 bytes`},
		"auth username with colon":    {base + "  kvm = {}\n  auth = { username = \"u:x\", password = \"longenough\" }", `Invalid username.*Attribute auth.username: username "u:x"`},
		"write-only without version":  {base + "  kvm = {}\n  auth = { username = \"u\", password_wo = \"longenough\" }", `Invalid Attribute Combination.*auth.password_wo_version`},
		"kvm vcpus zero":              {base + "  kvm = { vcpus = 0 }", `Invalid Attribute Value.*Attribute kvm.vcpus value must be between 1 and 64, got: 0`},
		"kvm memory too small":        {base + "  kvm = { memory_mib = 16 }", `Invalid Attribute Value.*Attribute kvm.memory_mib value must be between`},
		"kvm host with slash":         {base + "  kvm = { host = \"a/b\" }", `Invalid kvm host name.*Attribute kvm.host: kvm host name "a/b" must be non-empty and contain no slash`},
		"kvm host not configured":     {base + "  kvm = { host = \"hv9\" }", `Unknown kvm.host.*Attribute kvm.host: "hv9" is not configured on the provider; the provider's kvm block names hv1, local, rack1.hv2`},
		"kvm mac multicast":           {base + "  kvm = { mac = \"01:00:5e:00:00:01\" }", `Invalid MAC address.*Attribute kvm.mac: "01:00:5e:00:00:01" is a multicast address`},
		"kvm ip not ipv4":             {base + "  kvm = { ip = \"fe80::1\" }", `Invalid IPv4 address.*Attribute kvm.ip`},
		"kvm network and bridge":      {base + "  kvm = { network = \"default\", bridge = \"br0\" }", `Invalid Attribute Combination.*kvm.bridge`},
		"kvm domain type":             {base + "  kvm = { domain_type = \"xen\" }", `Invalid Attribute Value Match.*kvm.domain_type value must be one of`},
		"kvm user net without port":   {base + "  kvm = { user_net = true }", `Invalid Attribute Combination.*kvm.forward_port`},
		"kvm user net and network":    {base + "  kvm = { user_net = true, forward_port = 13128, network = \"default\" }", `Invalid Attribute Combination.*kvm.network`},
		"kvm image and base volume":   {base + "  kvm = { image_file = \"/tmp/x.qcow2\", base_volume = \"b\" }", `Invalid Attribute Combination.*kvm.base_volume`},
		"kvm url without sha256":      {base + "  kvm = { image_url = \"https://images.example/d.qcow2\" }", `Invalid Attribute Combination.*Attribute "kvm.image_sha256" must be specified when "kvm.image_url" is specified`},
		"kvm sha256 without url":      {base + "  kvm = { image_sha256 = \"" + goodSHA + "\" }", `Invalid Attribute Combination.*Attribute "kvm.image_url" must be specified when "kvm.image_sha256" is specified`},
		"kvm sha256 not hex":          {base + "  kvm = { image_url = \"https://i.example/d.qcow2\", image_sha256 = \"" + strings.Repeat("g", 64) + "\" }", `Invalid Attribute Value Match.*Attribute kvm.image_sha256 must be 64 hex digits.*got: g{64}`},
		"kvm sha256 too short":        {base + "  kvm = { image_url = \"https://i.example/d.qcow2\", image_sha256 = \"" + goodSHA[:40] + "\" }", `Invalid Attribute Value Match.*Attribute kvm.image_sha256 must be 64 hex digits`},
		"kvm url not http":            {base + "  kvm = { image_url = \"ftp://i.example/d.qcow2\", image_sha256 = \"" + goodSHA + "\" }", `Invalid URL.*Attribute kvm.image_url: "ftp://i.example/d.qcow2" must be an http or https URL`},
		"kvm url without host":        {base + "  kvm = { image_url = \"https:///d.qcow2\", image_sha256 = \"" + goodSHA + "\" }", `Invalid URL.*Attribute kvm.image_url`},
		"kvm url and base volume":     {base + "  kvm = { image_url = \"https://i.example/d.qcow2\", image_sha256 = \"" + goodSHA + "\", base_volume = \"b\" }", `Invalid Attribute Combination.*Attribute "kvm.base_volume" cannot be specified when "kvm.image_url" is specified`},
		"kvm url and image file":      {base + "  kvm = { image_url = \"https://i.example/d.qcow2\", image_sha256 = \"" + goodSHA + "\", image_file = \"/tmp/x.qcow2\" }", `Invalid Attribute Combination.*Attribute "kvm.image_file" cannot be specified when "kvm.image_url" is specified`},
		"gcp spot and preemptible":    {base + "  gcp = { spot = true, preemptible = true }", `Invalid Attribute Combination.*gcp.preemptible`},
		"gcp static ip without name":  {base + "  gcp = { static_egress_ip = true }", `Missing name.*Attribute gcp.static_egress_ip is true, so name must be set`},
		"gcp static ip name too long": {base + "  name = \"" + strings.Repeat("p", 61) + "\"\n  gcp = { static_egress_ip = true }", `Invalid name.*Attribute gcp.static_egress_ip is true, so name must suit it: the static address would be named "p{61}-ip", 64 characters.*at most 60 characters`},
		"kubernetes namespace bad":    {base + "  kubernetes = { namespace = \"Team_A\" }", `Invalid kubernetes namespace.*Attribute kubernetes.namespace: "Team_A"`},
		// Kubernetes and GCP values the API would refuse only at apply, or that would never work.
		"kubernetes request not a quantity":          {base + k8s(`resources = { requests = { cpu = "100 m" } }`), `Invalid kubernetes resource.*Attribute kubernetes.resources.requests\["cpu"\]: resource cpu: "100 m" is not a quantity`},
		"kubernetes limit negative":                  {base + k8s(`resources = { limits = { memory = "-1Gi" } }`), `Invalid kubernetes resource.*Attribute kubernetes.resources.limits\["memory"\]: resource memory: "-1Gi" is negative`},
		"kubernetes resource name unknown":           {base + k8s(`resources = { limits = { cpus = "1" } }`), `Invalid kubernetes resource.*Attribute kubernetes.resources.limits\["cpus"\]: resource name "cpus" is not one a container can ask for`},
		"kubernetes extended resource part":          {base + k8s(`resources = { limits = { "example.com/gpu" = "500m" } }`), `Invalid kubernetes resource.*Attribute kubernetes.resources.limits\["example.com/gpu"\]: resource example.com/gpu: "500m" must be a whole number`},
		"kubernetes request above limit":             {base + k8s(`resources = { requests = { memory = "512Mi" }, limits = { memory = "256Mi" } }`), `Invalid kubernetes resource.*Attribute kubernetes.resources.requests\["memory"\]: resource memory: request 512Mi is more than the limit 256Mi`},
		"kubernetes extended resource without limit": {base + k8s(`resources = { requests = { "example.com/dongle" = "1" } }`), `Invalid kubernetes resource.*Attribute kubernetes.resources.requests\["example.com/dongle"\]: resource example.com/dongle: a request needs a limit equal to it`},
		"kubernetes image uppercase":                 {base + k8s(`image = "Egress/Squid:1"`), `Invalid image reference.*Attribute kubernetes.image: image "Egress/Squid:1"`},
		"kubernetes image with space":                {base + k8s(`image = "squid:debian 12"`), `Invalid image reference.*Attribute kubernetes.image: image "squid:debian 12"`},
		"kubernetes node selector key":               {base + k8s(`node_selector = { "-role" = "egress" }`), `Invalid node selector label key.*Attribute kubernetes.node_selector\["-role"\]`},
		"kubernetes node selector value":             {base + k8s(`node_selector = { role = "egress nodes" }`), `Invalid node selector label value.*Attribute kubernetes.node_selector\["role"\]: label value "egress nodes"`},
		"gcp zone is a region":                       {base + "  gcp = { zone = \"europe-west1\" }", `Invalid gcp zone.*Attribute gcp.zone: zone "europe-west1"`},
		"gcp zone uppercase":                         {base + "  gcp = { zone = \"europe-west1-B\" }", `Invalid gcp zone.*Attribute gcp.zone: zone "europe-west1-B"`},
		"gcp service account not an email":           {base + "  gcp = { service_account = \"proxy-sa\" }", `Invalid service account.*Attribute gcp.service_account: service account "proxy-sa" must be an email`},
		// A last label in hex or octal makes the name an IPv4 address to resolvers (0x7f000001 is 127.0.0.1).
		"destination hex":            {base + "  kvm = {}\n  allowed_destinations = [\"0x7f000001\"]", `Invalid destination.*Attribute allowed_destinations\[Value\("0x7f000001"\)\]: destination "0x7f000001" must be a host name, not an IP address: its last label "0x7f000001" is a hexadecimal number`},
		"destination hex last label": {base + "  kvm = {}\n  allowed_destinations = [\"api.example.com\", \"1.0x7f\"]", `Invalid destination.*Attribute allowed_destinations\[Value\("1.0x7f"\)\]: destination "1.0x7f" must be a host name, not an IP address: its last label "0x7f" is a hexadecimal number`},
		"destination octal":          {base + "  kvm = {}\n  allowed_destinations = [\"0177.0.0.1\"]", `Invalid destination.*Attribute allowed_destinations\[Value\("0177.0.0.1"\)\]: destination "0177.0.0.1" must be a host name, not an IP address: its last label "1" is a decimal or octal number`},
		"destination octal number":   {base + "  kvm = {}\n  allowed_destinations = [\"017700000001\"]", `Invalid destination.*Attribute allowed_destinations\[Value\("017700000001"\)\]:.*"017700000001" is a decimal or octal number`},
		// Destination guards, TLS and limits.
		"private cidr public":                {base + "  kvm = {}\n  allowed_private_cidrs = [\"8.8.8.0/24\"]", `Invalid allowed private CIDR.*Attribute allowed_private_cidrs\[Value\("8.8.8.0/24"\)\]:.*not inside a private range`},
		"private cidr loopback":              {base + "  kvm = {}\n  allowed_private_cidrs = [\"127.0.0.0/8\"]", `Invalid allowed private CIDR.*Attribute allowed_private_cidrs\[Value\("127.0.0.0/8"\)\]`},
		"max connections zero":               {base + "  kvm = {}\n  max_connections_per_client = 0", `Invalid Attribute Value.*Attribute max_connections_per_client value must be between 1 and 16384, got: 0`},
		"tls not pem":                        {base + "  kvm = {}\n  tls = { certificate_pem = \"x\", private_key_pem = \"y\" }", `Invalid TLS certificate or key.*Attribute tls: certificate_pem holds something other than PEM blocks`},
		"tls key missing":                    {base + "  kvm = {}\n  tls = { certificate_pem = \"x\" }", `Invalid Attribute Combination.*No attribute specified when one \(and only one\) of \[tls.private_key_pem,tls.private_key_pem_wo\]`},
		"tls both keys":                      {goodTLS("private_key_pem = %[1]s, private_key_pem_wo = %[1]s, private_key_pem_wo_version = 1"), `Invalid Attribute Combination.*2 attributes specified when one \(and only one\) of \[tls.private_key_pem,tls.private_key_pem_wo\]`},
		"tls write-only key without version": {goodTLS("private_key_pem_wo = %s"), `Invalid Attribute Combination.*tls.private_key_pem_wo_version`},
		// The certificate is good: the error can only come from the write-only key, which validation sees.
		"tls write-only key not pem": {goodTLS("private_key_pem_wo = \"y\", private_key_pem_wo_version = 1%.0s"), `Invalid TLS certificate or key.*Attribute tls: private_key_pem must be exactly one PEM private key`},
	}
	expectRefused(t, tests)
}

// refusedConfig is a resource body that validation must refuse, and the error it must give.
type refusedConfig struct {
	body string
	want string // the diagnostic's summary, then its text naming the attribute
}

// expectRefused applies each body on the memory backends and expects its error, and no create call: an apply,
// not a plan-only step, so that a check that let the value through to apply would reach the backend, and the
// count would see it.
func expectRefused(t *testing.T, tests map[string]refusedConfig) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mem := newMemoryBackends()
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: mem.protoV6(),
				Steps: []resource.TestStep{{
					Config:      proxyConfig(tc.body),
					ExpectError: wrapped("(?s)Error: " + tc.want),
				}},
			})
			for _, b := range mem {
				if n := b.Calls("create"); n != 0 {
					t.Errorf("an invalid configuration reached the backend: %d create calls", n)
				}
			}
		})
	}
}

// Provider configuration errors point at the provider's attribute.
func TestAccProvider_invalidConfig(t *testing.T) {
	tests := map[string]struct {
		provider string
		want     string
	}{
		"owner uppercase":        {`owner = "Team"`, `(?s)Invalid label value.*Attribute owner: label value "Team"`},
		"owner empty":            {`owner = ""`, `(?s)Invalid value.*Attribute owner: must not be empty`},
		"owner missing":          {``, `(?s)Missing owner.*EGRESS_OWNER`},
		"default label reserved": {`owner = "t"` + "\n" + `default_labels = { egress-owner = "x" }`, `(?s)Invalid label key.*Attribute default_labels\["egress-owner"\]: label key "egress-owner" is reserved`},
		"backend not configured": {`owner = "t"`, `(?s)Backend not configured.*add a kvm = \{ ... \} attribute to the provider block`},
		"kvm uri not libvirt":    {`owner = "t"` + "\n" + `kvm = { hosts = { local = { uri = "http://example.com/" } } }`, `(?s)Invalid libvirt URI.*Attribute kvm.hosts\["local"\].uri: libvirt URI "http://example.com/": driver "http" cannot run`},
		"kvm uri empty":          {`owner = "t"` + "\n" + `kvm = { hosts = { local = { uri = "" } } }`, `(?s)Invalid libvirt URI.*libvirt URI is empty`},
		"kvm socket relative":    {`owner = "t"` + "\n" + `kvm = { hosts = { h = { uri = "qemu+ssh://kvm1/system?socket=libvirt-sock" } } }`, `(?s)Invalid libvirt URI.*Attribute kvm.hosts\["h"\].uri: libvirt URI .*socket "libvirt-sock" must be an absolute path`},
		"kvm host key bad":       {`owner = "t"` + "\n" + `kvm = { hosts = { "a b" = { uri = "qemu:///system" } } }`, `(?s)Invalid kvm host name.*kvm host name "a b"`},
		// What the kubernetes and gcp backends would refuse only when first used, or never.
		"kubernetes cluster name uppercase": {`owner = "t"` + "\n" + `kubernetes = { clusters = { Prod = { host = "https://k.example.com" } } }`, `(?s)Invalid kubernetes cluster name.*Attribute kubernetes.clusters\["Prod"\]: "Prod" must be 1 to 63 lowercase`},
		"kubernetes insecure with ca": {`owner = "t"` + "\n" + `kubernetes = { clusters = { main = { host = "https://k.example.com", insecure = true, cluster_ca_certificate = "x" } } }`,
			`(?s)Conflicting kubernetes.clusters\["main"\].insecure.*Attribute kubernetes.clusters\["main"\].insecure is true, so kubernetes.clusters\["main"\].cluster_ca_certificate must not be set: client-go refuses`},
		"gcp default zone is a region": {`owner = "t"` + "\n" + `gcp = { default_zone = "europe-west1" }`, `(?s)Invalid gcp zone.*Attribute gcp.default_zone: zone "europe-west1"`},
		"gcp project zone bad":         {`owner = "t"` + "\n" + `gcp = { projects = { p2 = { default_zone = "west1-b" } } }`, `(?s)Invalid gcp zone.*Attribute gcp.projects\["p2"\].default_zone: zone "west1-b"`},
		"gcp region is a zone":         {`owner = "t"` + "\n" + `gcp = { region = "europe-west1-b" }`, `(?s)Invalid gcp region.*Attribute gcp.region: region "europe-west1-b"`},
		"gcp endpoint without scheme":  {`owner = "t"` + "\n" + `gcp = { compute_endpoint = "compute.example.internal" }`, `(?s)Invalid URL.*Attribute gcp.compute_endpoint: "compute.example.internal" must be an http or https URL`},
		"gcp endpoint other scheme":    {`owner = "t"` + "\n" + `gcp = { compute_endpoint = "ftp://compute.example.internal/" }`, `(?s)Invalid URL.*Attribute gcp.compute_endpoint: "ftp://compute.example.internal/" must be an http or https URL`},
		// The seed ISO carries the htpasswd hash and the TLS key over the libvirt connection.
		"kvm tcp without insecure": {`owner = "t"` + "\n" + `kvm = { hosts = { h = { uri = "qemu+tcp://kvm1.example.com/system" } } }`,
			`(?s)Insecure libvirt transport.*Attribute kvm.hosts\["h"\].uri: libvirt URI "qemu\+tcp://kvm1.example.com/system" sends.*in clear.*insecure = true`},
		"kvm no_verify without insecure": {`owner = "t"` + "\n" + `kvm = { hosts = { h = { uri = "qemu+tls://kvm1.example.com/system?no_verify=1" } } }`,
			`(?s)Insecure libvirt transport.*Attribute kvm.hosts\["h"\].uri: libvirt URI "qemu\+tls://kvm1.example.com/system\?no_verify=1" does not verify.*insecure = true`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv(OwnerEnvVar, "")
			mem := newMemoryBackends()
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: mem.protoV6(),
				Steps: []resource.TestStep{{
					Config: `provider "egress" {
` + tc.provider + `
}
resource "egress_proxy" "test" {
  kvm                  = {}
  allowed_client_cidrs = ["10.0.0.0/8"]
}
`,
					ExpectError: wrapped(tc.want),
				}},
			})
		})
	}
}

// kvm.host accepts every name kvm.hosts accepts, including ones the proxy-name rules would refuse.
func TestAccProxy_kvmHostNamedAsInHosts(t *testing.T) {
	mem := newMemoryBackends()
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		Steps: []resource.TestStep{{
			Config: proxyConfig(`  kvm = { host = "rack1.hv2" }
  allowed_client_cidrs = ["10.0.0.0/8"]`),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("id"), knownvalue.StringRegexp(regexp.MustCompile(`^kvm/rack1\.hv2/egress-`))),
			},
		}},
	})
}

// The plan-time checks refuse typos, not the values real configurations use: each of these plans.
func TestAccProxy_validBackendValuesPlan(t *testing.T) {
	const base = "  allowed_client_cidrs = [\"10.0.0.0/8\"]\n"
	tests := map[string]struct{ provider, body string }{
		"kubernetes resources": {"", base + `  kubernetes = { namespace = "ns", resources = {
    requests = { cpu = "100m", memory = "128Mi", "hugepages-2Mi" = "64Mi", "example.com/dongle" = "1" }
    limits   = { cpu = "1.5", memory = "256Mi", "hugepages-2Mi" = "64Mi", "example.com/dongle" = "1", "ephemeral-storage" = "1G" }
  } }`},
		"kubernetes image with registry, port, tag and digest": {"", base + `  kubernetes = { namespace = "ns",
    image = "registry.example:5000/team/squid_proxy:6.10-r1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }`},
		"kubernetes image of docker hub": {"", base + `  kubernetes = { namespace = "ns", image = "ubuntu/squid" }`},
		"kubernetes node selector":       {"", base + `  kubernetes = { namespace = "ns", node_selector = { "node-role.kubernetes.io/egress" = "", "topology.kubernetes.io/zone" = "eu-1a" } }`},
		"gcp placement":                  {"", base + `  gcp = { project = "proj-1", zone = "northamerica-northeast1-a", service_account = "proxy@proj-1.iam.gserviceaccount.com" }`},
		"gcp default service account":    {"", base + `  gcp = { zone = "us-central1-a", service_account = "default" }`},
		"gcp provider settings": {`  gcp = { default_zone = "europe-west1-b", region = "europe-west1", compute_endpoint = "https://compute.p.example.internal/compute/v1/"
    projects = { p2 = { default_zone = "asia-east1-a", compute_endpoint = "http://127.0.0.1:8080" } } }`, base + "  gcp = { project = \"p2\" }"},
		"kubernetes cluster settings": {`  kubernetes = { clusters = { default = { host = "https://k.example.com", insecure = false, cluster_ca_certificate = "x" }, edge-2 = { host = "https://e.example.com", insecure = true } } }`,
			base + "  kubernetes = { namespace = \"ns\", cluster = \"edge-2\" }"},
		// The insecure transports are there for lab hosts that say so.
		"kvm tcp host marked insecure":        {`  kvm = { hosts = { local = { uri = "qemu+tcp://kvm1.example.com/system", insecure = true } } }`, base + "  kvm = {}"},
		"kvm unverified host marked insecure": {`  kvm = { hosts = { local = { uri = "qemu+ssh://root@kvm1.example.com/system?no_verify=1", insecure = true } } }`, base + "  kvm = {}"},
		"kvm tls and ssh hosts":               {`  kvm = { hosts = { local = { uri = "qemu+tls://kvm1.example.com/system" }, hv2 = { uri = "qemu+ssh://root@kvm2.example.com/system?no_verify=0" } } }`, base + "  kvm = {}"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mem := newMemoryBackends()
			providerBlock := testProviderBlock
			if tc.provider != "" {
				providerBlock = "provider \"egress\" {\n  owner = \"team-a\"\n" + tc.provider + "\n}\n"
			}
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: mem.protoV6(),
				Steps: []resource.TestStep{{
					Config:             providerBlock + "resource \"egress_proxy\" \"test\" {\n" + tc.body + "\n}\n",
					PlanOnly:           true,
					ExpectNonEmptyPlan: true,
				}},
			})
		})
	}
}
