package testutil

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on a thread moved into the named network namespace (one `ip netns add` made). The thread is
// never moved back: it ends with its goroutine (a locked thread is not reused), so no other goroutine ever
// runs in the namespace by accident. A socket fn makes stays in the namespace whichever thread uses it.
func InNetns(netns string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		f, err := os.Open("/run/netns/" + netns)
		if err != nil {
			ch <- err
			return
		}
		defer func() { _ = f.Close() }() // read only: needed just to enter the namespace
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("entering network namespace %s: %w", netns, err)
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// ListenInNetns listens on address inside the named network namespace, where the environment a test made
// there (a cluster's nodes, a libvirt network's guests) reaches its server and nothing outside does.
func ListenInNetns(netns, network, address string) (net.Listener, error) {
	var l net.Listener
	err := InNetns(netns, func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}
