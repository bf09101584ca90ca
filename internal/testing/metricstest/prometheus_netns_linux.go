package metricstest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"sync"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// PrometheusInNetns is Prometheus run inside the network namespace netns (one a test environment made, such as
// the test cluster's), where it reaches the targets there, pods' and Services' addresses, that nothing outside
// does. It listens on 127.0.0.1 of the namespace; the returned Process's URL is a port of the test's own
// loopback forwarded to it, so Query and WaitFor work as with Prometheus.
func PrometheusInNetns(t testing.TB, netns string, ruleFiles []string, targets ...Target) *Process {
	t.Helper()
	// A free port of the namespace's loopback: nothing else listens there but what the environment started.
	probe, err := testutil.ListenInNetns(netns, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inside := probe.Addr().String()
	if err := probe.Close(); err != nil {
		t.Fatal(err)
	}
	url := forwardIntoNetns(t, netns, inside)
	// nsenter enters the network namespace alone (ip netns exec would remount /sys as well) and then execs
	// Prometheus in its own place: killing the process kills Prometheus.
	args := append([]string{"--net=/run/netns/" + netns, Binary(t, "prometheus", "/usr/bin/prometheus")},
		prometheusArgs(t, inside, ruleFiles, targets)...)
	return Start(t, "prometheus", exec.Command("nsenter", args...), url, "/-/ready")
}

// forwardIntoNetns listens on a free port of 127.0.0.1 and forwards each connection to address inside netns,
// until the test ends; it returns the listener's URL.
func forwardIntoNetns(t testing.TB, netns, address string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }() // the copy's end is all that is left to say
				var up net.Conn
				if err := testutil.InNetns(netns, func() (err error) {
					up, err = net.Dial("tcp", address)
					return err
				}); err != nil {
					return // the client sees its connection closed, and its request fails with that
				}
				defer func() { _ = up.Close() }()
				done := make(chan struct{})
				go func() { _, _ = io.Copy(up, c); close(done) }()
				_, _ = io.Copy(c, up)
				_ = c.Close()
				<-done
			})
		}
	})
	return fmt.Sprintf("http://%s", l.Addr())
}
