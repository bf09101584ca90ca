package guest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// TestPodRunsSquid starts Squid with the container command exactly as the Kubernetes backend will set
// it, stdout and stderr being pipes as under a container runtime, and checks the readiness probe, a proxied
// request through authentication, and that the access log reaches stdout.
func TestPodRunsSquid(t *testing.T) {
	t.Parallel()
	bin := squidtest.Path(t)
	if bin != SquidPath {
		t.Skipf("the container command runs %s; squid here is %s", SquidPath, bin)
	}
	b := squidtest.NewUpstreams(t)
	hp := squidtest.Port(t, b.HTTP)
	dir := squidtest.Dir(t)
	// Only what a pod cannot have on this machine is set: the files in dir, names resolved through dir/hosts
	// (the DNS server 127.0.0.1 does not exist, so no lookup leaves the machine), and the loopback guard lifted
	// for the upstreams. Logs and pid file keep the container's values.
	opts := proxyconf.RenderOptions{
		ListenAddress:  netip.MustParseAddr("127.0.0.1"),
		HealthPort:     squidtest.FreePort(t),
		HtpasswdPath:   filepath.Join(dir, "passwd"),
		CoredumpDir:    dir,
		HostsFile:      squidtest.HostsFile(t, dir, []string{"allowed.test"}),
		DNSNameservers: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
	}.WithLoopbackDestinationsForTests()
	// The pod's own address, as the downward API gives it, and a name that resolves to it: a loopback address
	// other than the test's upstreams', which the loopback exception of the test options does not cover in
	// the own-address list.
	const podIP = "127.0.0.2"
	opts.OwnAddressesFile = filepath.Join(dir, "own-addresses")
	squidtest.AppendFile(t, opts.HostsFile, podIP+" pod-self.test\n")
	auth := proxyconf.BasicAuth{Username: "pod-user", Password: "pod-password"}
	s := proxyconf.Settings{Port: squidtest.FreePort(t), AllowedClientCIDRs: []string{"127.0.0.0/8"}, AllowedDestinations: []string{"allowed.test", "pod-self.test"}, AllowedPorts: []int{hp}, Users: []proxyconf.BasicAuth{auth}}
	k, err := RenderPod(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	if k.ProxyPort != s.Port || k.Readiness != (HTTPProbe{Port: opts.HealthPort, Path: proxyconf.HealthPath}) {
		t.Fatalf("ports: proxy %d readiness %+v", k.ProxyPort, k.Readiness)
	}
	if k.Args[0] != ConfigDir+"/"+ConfigKey || len(k.Args) != 1 {
		t.Fatalf("args %q must be the mounted squid.conf", k.Args)
	}
	conf := k.ConfigMapData[ConfigKey]
	for _, want := range []string{"access_log stdio:/dev/stdout egress", "cache_log " + TerminationLog, "pid_filename none", "auth_param basic program " + proxyconf.AuthHelperPath + " " + opts.HtpasswdPath} {
		if !strings.Contains(conf, want+"\n") {
			t.Errorf("squid.conf lacks %q", want)
		}
	}
	if k.TerminationMessagePath != TerminationLog {
		t.Errorf("termination message path %q, want the cache log %q", k.TerminationMessagePath, TerminationLog)
	}
	// The kubelet's termination message file is not on this machine: a file made as the kubelet makes it
	// (mode 0666, so any user may write it) stands in.
	termLog := filepath.Join(dir, "termination-log")
	squidtest.WriteSecretFile(t, termLog, nil)
	if err := os.Chmod(termLog, 0o666); err != nil {
		t.Fatal(err)
	}
	opts.CacheLog = termLog
	if k, err = RenderPod(s, opts); err != nil {
		t.Fatal(err)
	}
	conf = k.ConfigMapData[ConfigKey]
	confPath := filepath.Join(dir, ConfigKey)
	squidtest.WriteSecretFile(t, confPath, []byte(conf))
	squidtest.WriteSecretFile(t, opts.HtpasswdPath, k.SecretData[SecretKey])

	// The mounted path is the only thing that differs from a pod.
	cmd := exec.Command(k.Command[0], append(k.Command[1:], confPath)...)
	cmd.Env = append(os.Environ(), PodIPsEnv+"="+podIP+",fd00::2", PodIPEnv+"="+podIP)
	sq := squidtest.Start(t, cmd, fmt.Sprintf("127.0.0.1:%d", s.Port), fmt.Sprintf("127.0.0.1:%d", opts.HealthPort), dir)
	// Squid's shared memory is named after its service name, "squid" here as in a pod. Stopping it the way the
	// kubelet does, before startSquidCmd's kill (cleanups run last first), lets it remove that memory.
	t.Cleanup(func() {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return // it has exited already: nothing to wait for
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	probe := squidtest.Client{Proxy: sq.Health, From: "127.0.0.3"}
	if got := probe.Get(t, k.Readiness.Path, "10.0.0.7:"+fmt.Sprint(k.Readiness.Port)); got.Status != 200 {
		t.Errorf("readiness probe: %d, want 200", got.Status)
	}
	c := b.Client(sq, "127.0.0.1")
	if got := c.Get(t, fmt.Sprintf("http://allowed.test:%d/", hp), "allowed.test"); got.Status != 407 {
		t.Errorf("without credentials: %d, want 407", got.Status)
	}
	c.User, c.Pass = auth.Username, auth.Password
	if got := c.Get(t, fmt.Sprintf("http://allowed.test:%d/", hp), "allowed.test"); got.Status != 200 {
		t.Errorf("with credentials: %d, want 200", got.Status)
	}
	// The pod's own address is refused, although its name is allowed: the start command listed it.
	if got := c.Get(t, fmt.Sprintf("http://pod-self.test:%d/", hp), "pod-self.test"); got.Status != 403 {
		t.Errorf("a request to the pod's own address: %d, want 403", got.Status)
	}
	if own, err := os.ReadFile(opts.OwnAddressesFile); err != nil || string(own) != podIP+"\nfd00::2\n" {
		t.Errorf("own addresses listed %q (%v), want the pod's two", own, err)
	}
	for _, want := range []string{
		fmt.Sprintf("client=127.0.0.1 user=pod-user method=GET host=allowed.test port=%d status=200", hp),
		fmt.Sprintf("host=pod-self.test port=%d status=403 squid=TCP_DENIED bytes=", hp),
	} {
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(sq.Output.String(), want); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("stdout lacks the access log line %q:\n%s", want, sq.Output)
			}
		}
	}
	if !strings.Contains(sq.Output.String(), "host=pod-self.test port="+fmt.Sprint(hp)+" status=403") ||
		!strings.Contains(sq.Output.String(), "reason="+proxyconf.ReasonDestinationAddress) {
		t.Errorf("the refusal of the pod's own address is not the destination guard's:\n%s", sq.Output)
	}
	// The termination message, which a crash's diagnostic quotes, is the cache log: Squid's own lines, never a
	// client's; stderr carries the same lines for kubectl logs.
	term, err := os.ReadFile(termLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(term), "Starting Squid") || strings.Contains(string(term), "client=") {
		t.Errorf("termination log is not the cache log alone:\n%s", term)
	}
	if !strings.Contains(sq.Output.String(), "Starting Squid") {
		t.Errorf("stderr lacks the cache log:\n%s", sq.Output)
	}
	if strings.Contains(sq.Output.String(), "FATAL") || strings.Contains(sq.Output.String(), "Permission denied") {
		t.Errorf("squid complained:\n%s", sq.Output)
	}
	if _, err := os.Stat(filepath.Join(dir, "squid.pid")); err == nil {
		t.Error("a pid file was written although the container form needs none")
	}
}

// The container's start command lists the pod's own addresses from the downward API variables before it
// starts Squid, and does not start Squid without one. Squid's path is swapped for echo, which prints the
// arguments Squid would get: the command is the container's otherwise.
func TestPodStartListsOwnAddresses(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		env      []string
		wantList string // "" for no list and no start
	}{
		"dual stack":        {env: []string{PodIPsEnv + "=10.244.0.5,fd00:10:244::5", PodIPEnv + "=10.244.0.5"}, wantList: "10.244.0.5\nfd00:10:244::5\n"},
		"one family":        {env: []string{PodIPsEnv + "=10.244.0.5", PodIPEnv + "=10.244.0.5"}, wantList: "10.244.0.5\n"},
		"primary only":      {env: []string{PodIPEnv + "=fd00:10:244::5"}, wantList: "fd00:10:244::5\n"},
		"none":              {},
		"empty variables":   {env: []string{PodIPsEnv + "=", PodIPEnv + "="}},
		"only separators":   {env: []string{PodIPsEnv + "=,", PodIPEnv + "=10.244.0.5"}},
		"trailing comma":    {env: []string{PodIPsEnv + "=10.244.0.5,"}, wantList: "10.244.0.5\n"},
		"leading separator": {env: []string{PodIPsEnv + "=,fd00:10:244::5"}, wantList: "fd00:10:244::5\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			own := filepath.Join(dir, "own-addresses")
			k, err := RenderPod(proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}},
				proxyconf.RenderOptions{OwnAddressesFile: own})
			if err != nil {
				t.Fatal(err)
			}
			script := strings.Replace(k.Command[2], "exec "+SquidPath+" ", "exec echo squid ", 1)
			if script == k.Command[2] {
				t.Fatalf("the start command does not exec %s: %s", SquidPath, script)
			}
			cmd := exec.Command(k.Command[0], append([]string{k.Command[1], script}, append(k.Command[3:], k.Args...)...)...)
			cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tc.env...)
			out, err := cmd.CombinedOutput()
			list, readErr := os.ReadFile(own)
			if tc.wantList == "" {
				if err == nil || !strings.Contains(string(out), "own address is unknown") || strings.Contains(string(out), "squid -N") {
					t.Errorf("without an address the command ran (%v):\n%s", err, out)
				}
				if readErr == nil && len(list) > 0 { // an empty list is no list: Squid did not start
					t.Errorf("without an address the command listed %q", list)
				}
				return
			}
			if err != nil || !strings.Contains(string(out), "squid -N -d 1 -f "+k.Args[0]) {
				t.Errorf("the command did not start Squid (%v):\n%s", err, out)
			}
			if string(list) != tc.wantList {
				t.Errorf("own addresses listed %q (%v), want %q", list, readErr, tc.wantList)
			}
		})
	}
}

// TestSquidParsesEveryPodConfig runs `squid -k parse` on the pod's squid.conf for each of the combinations
// proxyconf's TestSquidParsesEveryConfig parses, and accepts no warning.
func TestSquidParsesEveryPodConfig(t *testing.T) {
	t.Parallel()
	for name, s := range proxyconftest.ParseCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The own-address list the container's start command writes before Squid parses its config.
			own := filepath.Join(t.TempDir(), "own-addresses")
			if err := os.WriteFile(own, []byte("10.244.0.5\nfd00:10:244::5\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			k, err := RenderPod(s, proxyconf.RenderOptions{OwnAddressesFile: own})
			if err != nil {
				t.Fatal(err)
			}
			conf := []byte(k.ConfigMapData[ConfigKey])
			out, complaints, err := squidtest.Complaints(t, conf)
			if err != nil {
				t.Fatalf("kubernetes form: squid -k parse: %v\n%s\n%s", err, out, conf)
			}
			for _, line := range complaints {
				t.Errorf("kubernetes form: squid -k parse: %s", line)
			}
		})
	}
}
