package kvm

import (
	"fmt"
	"slices"
	"sort"
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
