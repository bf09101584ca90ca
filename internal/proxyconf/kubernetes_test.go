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
)

// TestKubernetesFormRuns starts Squid with the container command exactly as the Kubernetes backend will set
// it, stdout and stderr being pipes as under a container runtime, and checks the readiness probe, a proxied
// request through authentication, and that the access log reaches stdout.
func TestKubernetesFormRuns(t *testing.T) {
	t.Parallel()
	bin := squidPath(t)
	if bin != KubernetesSquidPath {
		t.Skipf("the container command runs %s; squid here is %s", KubernetesSquidPath, bin)
	}
	b := newBackends(t)
	hp := b.port(t, b.http)
	dir := squidDir(t)
	opts := testOptions(t, dir, testHosts)
	// Only what a pod cannot have on this machine is overridden; logs and pid file keep the container's values.
	opts.AccessLog, opts.CacheLog, opts.PidFile = "", "", ""
	auth := &BasicAuth{Username: "pod-user", Password: "pod-password"}
	s := Settings{Port: freePort(t), AllowedClientCIDRs: []string{"127.0.0.0/8"}, AllowedDestinations: []string{"allowed.test"}, AllowedPorts: []int{hp}, Auth: auth}
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
	writeSecretFile(t, termLog, nil)
	if err := os.Chmod(termLog, 0o666); err != nil {
		t.Fatal(err)
	}
	opts.CacheLog = termLog
	if k, err = RenderKubernetes(s, opts); err != nil {
		t.Fatal(err)
	}
	conf = k.ConfigMapData[KubernetesConfigKey]
	confPath := filepath.Join(dir, KubernetesConfigKey)
	writeSecretFile(t, confPath, []byte(conf))
	writeSecretFile(t, opts.HtpasswdPath, k.SecretData[KubernetesSecretKey])

	// The mounted path is the only thing that differs from a pod.
	cmd := exec.Command(k.Command[0], append(k.Command[1:], confPath)...)
	sq := startSquidCmd(t, cmd, fmt.Sprintf("127.0.0.1:%d", s.Port), fmt.Sprintf("127.0.0.1:%d", opts.HealthPort), dir)
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

	probe := proxyClient{proxy: sq.health, from: "127.0.0.3"}
	if got := probe.get(t, k.Readiness.Path, "10.0.0.7:"+fmt.Sprint(k.Readiness.Port)); got.status != 200 {
		t.Errorf("readiness probe: %d, want 200", got.status)
	}
	c := b.client(sq, "127.0.0.1")
	if got := c.get(t, fmt.Sprintf("http://allowed.test:%d/", hp), "allowed.test"); got.status != 407 {
		t.Errorf("without credentials: %d, want 407", got.status)
	}
	c.user, c.pass = auth.Username, auth.Password
	if got := c.get(t, fmt.Sprintf("http://allowed.test:%d/", hp), "allowed.test"); got.status != 200 {
		t.Errorf("with credentials: %d, want 200", got.status)
	}
	want := fmt.Sprintf("client=127.0.0.1 user=pod-user method=GET host=allowed.test port=%d status=200", hp)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(sq.output.String(), want); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stdout lacks the access log line %q:\n%s", want, sq.output)
		}
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
	if !strings.Contains(sq.output.String(), "Starting Squid") {
		t.Errorf("stderr lacks the cache log:\n%s", sq.output)
	}
	if strings.Contains(sq.output.String(), "FATAL") || strings.Contains(sq.output.String(), "Permission denied") {
		t.Errorf("squid complained:\n%s", sq.output)
	}
	if _, err := os.Stat(filepath.Join(dir, "squid.pid")); err == nil {
		t.Error("a pid file was written although the container form needs none")
	}
}
