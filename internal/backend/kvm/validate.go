package kvm

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ValidateHostName accepts what Config.Hosts accepts as a host's name: it is a segment of every id, so it
// holds no slash and no space.
func ValidateHostName(name string) error {
	if name == "" || strings.ContainsAny(name, "/ \t\n") {
		return fmt.Errorf("kvm host name %q must be non-empty and contain no slash or space: it is part of every id", name)
	}
	return nil
}

// uriDrivers are the libvirt drivers a proxy can be made on: its domains are QEMU domains, and libvirt's
// test driver stands in for a host in tests.
var uriDrivers = []string{"qemu", "test"}

// ValidateURI accepts the libvirt URIs the backend can dial and make a proxy on, by the parser Create uses.
func ValidateURI(uri string) error {
	if _, err := parseURI(uri); err != nil {
		return err
	}
	driver, _, _ := strings.Cut(strings.SplitN(uri, ":", 2)[0], "+")
	if !slices.Contains(uriDrivers, driver) {
		return fmt.Errorf("libvirt URI %q: driver %q cannot run a proxy's QEMU domain (use %s)", uri, driver, strings.Join(uriDrivers, " or "))
	}
	return nil
}

// ValidateTransport refuses, unless the host is marked insecure, a URI whose connection anyone on the path
// could read or take over: qemu+tcp:// (no encryption, no authentication of the host), and no_verify=1 on a
// remote transport (the host's TLS certificate or SSH host key unchecked). Creating a proxy sends its seed
// ISO over that connection, and the ISO carries the proxy's htpasswd hash and TLS private key. The provider
// checks this at plan time and the backend again before it dials, for URIs the plan does not see
// (LIBVIRT_DEFAULT_URI).
func ValidateTransport(uri string, insecure bool) error {
	t, err := parseURI(uri)
	if err != nil {
		return err
	}
	return checkTransport(uri, t, insecure)
}

func checkTransport(uri string, t target, insecure bool) error {
	switch {
	case insecure:
		return nil
	case t.transport == "tcp":
		return fmt.Errorf("libvirt URI %q sends everything in clear and authenticates no host: each proxy's seed ISO, with its htpasswd hash "+
			"and TLS private key, would cross the network readable by anyone on the path. Use qemu+tls:// or qemu+ssh://, "+
			"or set insecure = true on the host in the provider's kvm.hosts to accept it", uri)
	case t.transport != "unix" && noVerify(t):
		return fmt.Errorf("libvirt URI %q does not verify the host (no_verify): anyone on the path could pose as it and receive each proxy's "+
			"seed ISO, with its htpasswd hash and TLS private key. Remove no_verify, "+
			"or set insecure = true on the host in the provider's kvm.hosts to accept it", uri)
	}
	return nil
}

// noVerify reports libvirt's no_verify=1 (any non-zero number): the host's certificate or key is not checked.
func noVerify(t target) bool {
	n, _ := strconv.Atoi(t.query.Get("no_verify"))
	return n != 0
}

// HostNames lists the hosts cfg configures, the default host included when none is, in a stable order.
func (c Config) HostNames() []string {
	if len(c.Hosts) == 0 {
		return []string{DefaultHostName}
	}
	names := make([]string, 0, len(c.Hosts))
	for n := range c.Hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
