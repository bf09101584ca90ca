// Package computefake is a stateful Compute Engine REST server for tests. It serves the routes the gcp backend
// calls, with request and response bodies decoded and encoded by protojson into computepb types, so what the
// real Go client reads is exactly what it would parse from Compute Engine. Anything it does not implement
// answers 501, so a backend that starts calling a new route fails loudly instead of passing against a guess.
package computefake

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// Options shape a Server. The zero value serves us-central1-a..c and europe-west1-b with generous quotas.
type Options struct {
	// Zones the fake knows; each zone's region is its name without the last "-x".
	Zones []string
	// OperationLatency is how long an operation stays RUNNING before it is DONE.
	OperationLatency time.Duration
	// Token, when set, is the bearer token every Compute request must carry.
	Token string
	// OnOperationDone, when set, is called (in a goroutine of its own) after each operation completed
	// without error, with its type ("insert", "setMetadata", ...) and target URL: tests play the guest with it.
	OnOperationDone func(opType, targetLink string)
}

// Request is one request the server received, for counting calls.
type Request struct {
	Method string
	Path   string
	Query  string
	Status int
}

// Server is the fake. All exported methods are safe for concurrent use with requests in flight.
type Server struct {
	URL string
	srv *httptest.Server

	mu        sync.Mutex
	opts      Options
	zones     map[string]string // zone -> region
	instances map[string]*computepb.Instance
	addresses map[string]*computepb.Address
	ops       map[string]*operation
	guest     map[string]map[string]string // instance key -> "namespace/key" -> value
	quotas    map[string]map[string]float64
	exhausted map[string]bool
	brokenZ   map[string]string
	faults    []*Fault
	log       []Request
	seq       uint64
	nextHost  int
	now       func() time.Time
	mdKey     string
}

// New starts a fake on a loopback port. Close it when done.
func New(opts Options) *Server {
	if len(opts.Zones) == 0 {
		opts.Zones = []string{"us-central1-a", "us-central1-b", "us-central1-c", "europe-west1-b"}
	}
	s := &Server{
		opts: opts, zones: map[string]string{}, instances: map[string]*computepb.Instance{},
		addresses: map[string]*computepb.Address{}, ops: map[string]*operation{}, guest: map[string]map[string]string{},
		quotas: map[string]map[string]float64{}, exhausted: map[string]bool{}, brokenZ: map[string]string{}, now: time.Now,
	}
	for _, z := range opts.Zones {
		s.zones[z] = RegionOf(z)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// RegionOf returns the region of a zone name.
func RegionOf(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}

// SetOperationLatency changes how long new operations run.
func (s *Server) SetOperationLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.OperationLatency = d
}

// SetQuota sets the limit of a regional metric such as CPUS, INSTANCES or STATIC_ADDRESSES.
func (s *Server) SetQuota(region, metric string, limit float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.quotas[region] == nil {
		s.quotas[region] = map[string]float64{}
	}
	s.quotas[region][metric] = limit
}

// ExhaustZone makes instance inserts in zone fail with ZONE_RESOURCE_POOL_EXHAUSTED.
func (s *Server) ExhaustZone(zone string, exhausted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exhausted[zone] = exhausted
}

// BreakZone makes aggregatedList report zone as unreachable with code (for example "UNREACHABLE").
func (s *Server) BreakZone(zone, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.brokenZ[zone] = code
}

// Requests returns a copy of the request log.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// ResetLog empties the request log.
func (s *Server) ResetLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}

// Count returns how many logged requests have method (empty: any) and a path matching pathRE.
func (s *Server) Count(method, pathRE string) int {
	re := regexp.MustCompile(pathRE)
	n := 0
	for _, r := range s.Requests() {
		if (method == "" || r.Method == method) && re.MatchString(r.Path) {
			n++
		}
	}
	return n
}

// Instance returns a copy of the stored instance, or nil.
func (s *Server) Instance(project, zone, name string) *computepb.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if in, ok := s.instances[key(project, zone, name)]; ok {
		return clone(in)
	}
	return nil
}

// Instances returns copies of every stored instance, sorted by zone and name.
func (s *Server) Instances() []*computepb.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	var out []*computepb.Instance
	for _, in := range s.instances {
		out = append(out, clone(in))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetSelfLink() < out[j].GetSelfLink() })
	return out
}

// Address returns a copy of the stored regional address, or nil.
func (s *Server) Address(project, region, name string) *computepb.Address {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if a, ok := s.addresses[key(project, region, name)]; ok {
		return clone(a)
	}
	return nil
}

// DeleteInstance removes an instance at once, as someone acting behind the provider's back would.
func (s *Server) DeleteInstance(project, zone, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(project, zone, name)
	in, ok := s.instances[k]
	if ok {
		s.releaseAddresses(in)
		delete(s.instances, k)
		delete(s.guest, k)
	}
	return ok
}

// SetInstanceStatus overrides an instance's status (TERMINATED, SUSPENDED, ...).
func (s *Server) SetInstanceStatus(project, zone, name, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.instances[key(project, zone, name)]; ok {
		in.Status = &status
	}
}

// SetGuestAttribute writes a guest attribute, as the guest does through the metadata server.
func (s *Server) SetGuestAttribute(project, zone, name, path, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(project, zone, name)
	if s.guest[k] == nil {
		s.guest[k] = map[string]string{}
	}
	s.guest[k][path] = value
}

func key(parts ...string) string { return strings.Join(parts, "/") }

// GuestAttribute reads a guest attribute ("namespace/key") an instance's guest wrote, "" when none.
func (s *Server) GuestAttribute(project, zone, name, path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.guest[key(project, zone, name)][path]
}
