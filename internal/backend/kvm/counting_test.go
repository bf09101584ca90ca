package kvm

import (
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
	"sort"
	"strconv"
	"sync"
)

// counter tallies calls per api method. Every api method is one libvirt RPC (NetworkUpdateCompat is two on
// the wire: it first asks the daemon which argument order it expects).
type counter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *counter) add(method string) {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
}

// take returns the total since the last take and the per-method counts, and starts again from zero.
func (c *counter) take() (int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	total, per := 0, c.calls
	for _, n := range per {
		total += n
	}
	c.calls = map[string]int{}
	return total, per
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.calls))
	for k := range c.calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		s += k + "=" + strconv.Itoa(c.calls[k]) + " "
	}
	return s
}

// countingAPI counts every call on its way to next.
func countingAPI(next api, c *counter) api { return libvirtconn.Trace(next, c.add) }
