package proxyconf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// TestKubernetesFormRuns starts Squid with the container command exactly as the Kubernetes backend will set
// it, stdout and stderr being pipes as under a container runtime, and checks the readiness probe, a proxied
// request through authentication, and that the access log reaches stdout.
func TestKubernetesFormRuns(t *testing.T) {
	t.Parallel()
	bin := squidtest.Path(t)
	if bin != KubernetesSquidPath {
		t.Skipf("the container command runs %s; squid here is %s", KubernetesSquidPath, bin)
	}
	b := squidtest.NewUpstreams(t)
	hp := squidtest.Port(t, b.HTTP)
	dir := squidtest.Dir(t)
	opts := testOptions(t, dir, testHosts)
	// Only what a pod cannot have on this machine is overridden; logs and pid file keep the container's values.
	opts.AccessLog, opts.CacheLog, opts.PidFile = "", "", ""
	// The pod's own address, as the downward API gives it, and a name that resolves to it: a loopback address
	// other than the test's upstreams', which the loopback exception of the test options does not cover in
	// the own-address list.
	const podIP = "127.0.0.2"
	opts.OwnAddressesFile = filepath.Join(dir, "own-addresses")
	squidtest.AppendFile(t, opts.HostsFile, podIP+" pod-self.test\n")
	auth := &BasicAuth{Username: "pod-user", Password: "pod-password"}
	s := Settings{Port: squidtest.FreePort(t), AllowedClientCIDRs: []string{"127.0.0.0/8"}, AllowedDestinations: []string{"allowed.test", "pod-self.test"}, AllowedPorts: []int{hp}, Auth: auth}
	k, err := RenderKubernetes(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	if k.ProxyPort != s.Port || k.Readiness != (HTTPProbe{Port: opts.HealthPort, Path: HealthPath}) {
		t.Fatalf("ports: proxy %d readiness %+v", k.ProxyPort, k.Readiness)
	}
	if k.Args[0] != KubernetesConfigDir+"/"+KubernetesConfigKey || len(k.Args) != 1 {
		t.Fatalf("args %q must be the mounted squid.conf", k.Args)
	}
	conf := k.ConfigMapData[KubernetesConfigKey]
	for _, want := range []string{"access_log stdio:/dev/stdout egress", "cache_log " + KubernetesTerminationLog, "pid_filename none", "auth_param basic program " + AuthHelperPath + " " + opts.HtpasswdPath} {
		if !strings.Contains(conf, want+"\n") {
			t.Errorf("squid.conf lacks %q", want)
		}
	}
	if k.TerminationMessagePath != KubernetesTerminationLog {
		t.Errorf("termination message path %q, want the cache log %q", k.TerminationMessagePath, KubernetesTerminationLog)
	}
	// The kubelet's termination message file is not on this machine: a file made as the kubelet makes it
	// (mode 0666, so any user may write it) stands in.
	termLog := filepath.Join(dir, "termination-log")
	squidtest.WriteSecretFile(t, termLog, nil)
	if err := os.Chmod(termLog, 0o666); err != nil {
		t.Fatal(err)
	}
	opts.CacheLog = termLog
	if k, err = RenderKubernetes(s, opts); err != nil {
		t.Fatal(err)
	}
	conf = k.ConfigMapData[KubernetesConfigKey]
	confPath := filepath.Join(dir, KubernetesConfigKey)
	squidtest.WriteSecretFile(t, confPath, []byte(conf))
	squidtest.WriteSecretFile(t, opts.HtpasswdPath, k.SecretData[KubernetesSecretKey])

	// The mounted path is the only thing that differs from a pod.
	cmd := exec.Command(k.Command[0], append(k.Command[1:], confPath)...)
	cmd.Env = append(os.Environ(), KubernetesPodIPsEnv+"="+podIP+",fd00::2", KubernetesPodIPEnv+"="+podIP)
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
		!strings.Contains(sq.Output.String(), "reason="+ReasonDestinationAddress) {
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
func TestKubernetesStartListsOwnAddresses(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		env      []string
		wantList string // "" for no list and no start
	}{
		"dual stack":        {env: []string{KubernetesPodIPsEnv + "=10.244.0.5,fd00:10:244::5", KubernetesPodIPEnv + "=10.244.0.5"}, wantList: "10.244.0.5\nfd00:10:244::5\n"},
		"one family":        {env: []string{KubernetesPodIPsEnv + "=10.244.0.5", KubernetesPodIPEnv + "=10.244.0.5"}, wantList: "10.244.0.5\n"},
		"primary only":      {env: []string{KubernetesPodIPEnv + "=fd00:10:244::5"}, wantList: "fd00:10:244::5\n"},
		"none":              {},
		"empty variables":   {env: []string{KubernetesPodIPsEnv + "=", KubernetesPodIPEnv + "="}},
		"only separators":   {env: []string{KubernetesPodIPsEnv + "=,", KubernetesPodIPEnv + "=10.244.0.5"}},
		"trailing comma":    {env: []string{KubernetesPodIPsEnv + "=10.244.0.5,"}, wantList: "10.244.0.5\n"},
		"leading separator": {env: []string{KubernetesPodIPsEnv + "=,fd00:10:244::5"}, wantList: "fd00:10:244::5\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			own := filepath.Join(dir, "own-addresses")
			k, err := RenderKubernetes(Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}},
				RenderOptions{OwnAddressesFile: own})
			if err != nil {
				t.Fatal(err)
			}
			script := strings.Replace(k.Command[2], "exec "+KubernetesSquidPath+" ", "exec echo squid ", 1)
			if script == k.Command[2] {
				t.Fatalf("the start command does not exec %s: %s", KubernetesSquidPath, script)
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
