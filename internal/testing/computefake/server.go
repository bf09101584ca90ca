// Package computefake is a stateful Compute Engine REST server for tests. It serves the routes the gcp backend
// calls, with request and response bodies decoded and encoded by protojson into computepb types, so what the
// real Go client reads is exactly what it would parse from Compute Engine. Anything it does not implement
// answers 501, so a backend that starts calling a new route fails loudly instead of passing against a guess.
//
// It is as strict as Compute Engine's documentation: every request is checked against the Compute discovery
// document (field names, types, enum values, required fields, parameter patterns; discovery.go), and the
// documented rules are enforced: metadata and label limits, fingerprints, guest attributes off unless
// enable-guest-attributes is TRUE and their query rate, operation and address states, aggregated lists, and
// the caller's IAM permissions, one per method (iam.go), with Resource Manager's testIamPermissions beside,
// and the objects of an internal passthrough Network Load Balancer with their dependency rules (lb.go).
// README.md lists each rule with its source, and says which could not be confirmed; rules_test.go proves each.
package computefake

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
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
	// ServiceAccountToken, when set, gives the access token the metadata server hands a VM running as the
	// service account email (R28): the token another test double (Secret Manager's) takes for that account.
	ServiceAccountToken func(email string) string
	// Permissions, when not nil, are all the caller holds on every project (a custom role's
	// includedPermissions): a Compute request that needs another is refused 403 forbidden, naming it (iam.go).
	// Nil grants everything, as to the project's owner.
	Permissions []string
	// Now, when set, is the fake's clock: operation latency, timestamps and the guest attribute query limits
	// follow it, so that a test can play minutes of polling without waiting them.
	Now func() time.Time
}

// Request is one request the server received, for counting calls.
type Request struct {
	Method string
	Path   string
	Query  string
	Status int
	// Time is when it arrived, on the fake's clock.
	Time time.Time
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
	pauses    []*Pause
	log       []Request
	seq       uint64
	nextHost  int
	now       func() time.Time
	mdKey     string
	// projectMeta is each project's common instance metadata (only what tests set: the fake serves no route
	// for it).
	projectMeta map[string]map[string]string
	// guestQueries holds each instance's recent getGuestAttributes queries; guestViolations counts those
	// beyond the documented rate; refusedGuest lists the guest writes refused because guest attributes were off.
	guestQueries    map[string][]time.Time
	guestViolations int
	refusedGuest    []string
	// orgPolicies are the organization policy constraints in force on each project (orgpolicy.go).
	orgPolicies map[string]orgPolicy
	// lb holds the load balancers' objects (lb.go).
	lb lbState
}

// New starts a fake on a loopback port. Close it when done.
func New(opts Options) *Server {
	if len(opts.Zones) == 0 {
		opts.Zones = []string{"us-central1-a", "us-central1-b", "us-central1-c", "europe-west1-b"}
	}
	// The discovery document is read before the first request, so that a machine where it cannot be found
	// fails every test at once with the reason, not each request with a 500.
	if _, err := discovery(); err != nil {
		panic(err)
	}
	s := &Server{
		opts: opts, zones: map[string]string{}, instances: map[string]*computepb.Instance{},
		addresses: map[string]*computepb.Address{}, ops: map[string]*operation{}, guest: map[string]map[string]string{},
		quotas: map[string]map[string]float64{}, exhausted: map[string]bool{}, brokenZ: map[string]string{}, now: time.Now,
		projectMeta: map[string]map[string]string{}, guestQueries: map[string][]time.Time{},
		orgPolicies: map[string]orgPolicy{},
	}
	if opts.Now != nil {
		s.now = opts.Now
	}
	for _, z := range opts.Zones {
		s.zones[z] = RegionOf(z)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server, dropping first the requests pauses hold.
func (s *Server) Close() {
	s.dropPauses()
	s.srv.Close()
}

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

// Addresses returns copies of every stored regional address, sorted by self link.
func (s *Server) Addresses() []*computepb.Address {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	var out []*computepb.Address
	for _, a := range s.addresses {
		out = append(out, clone(a))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetSelfLink() < out[j].GetSelfLink() })
	return out
}

// DeleteInstance removes an instance at once, as someone acting behind the provider's back would.
func (s *Server) DeleteInstance(project, zone, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(project, zone, name)
	in, ok := s.instances[k]
	if ok {
		s.releaseAddresses(in)
		s.dropMember(in.GetSelfLink())
		delete(s.instances, k)
		delete(s.guest, k)
		delete(s.guestQueries, k)
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

// SetGuestAttribute writes a guest attribute ("namespace/key") as the instance's guest does through the
// metadata server, under the same rules: the instance must exist, guest attributes must be on for it
// (EnableGuestAttributes), and the path must be a namespace and a key. It returns the metadata server's refusal.
func (s *Server) SetGuestAttribute(project, zone, name, path, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	k := key(project, zone, name)
	in, ok := s.instances[k]
	if !ok {
		return fmt.Errorf("computefake: no instance %s", k)
	}
	if e := s.guestWrite(project, k, in, path, value); e != nil {
		return fmt.Errorf("computefake: metadata server answered %d: %s", e.status, e.message)
	}
	return nil
}

// guestWrite stores a guest's write, or refuses it as the metadata server does. The caller holds s.mu.
func (s *Server) guestWrite(project, k string, in *computepb.Instance, path, value string) *apiError {
	if !s.guestAttributesEnabled(project, in) {
		s.refusedGuest = append(s.refusedGuest, k+" "+path)
		return &apiError{http.StatusForbidden, "", GuestAttributesDisabled}
	}
	if !guestPathRE.MatchString(path) {
		return &apiError{http.StatusBadRequest, "", "guest attribute path must be NAMESPACE/KEY of letters, digits, '_' and '-'"}
	}
	if s.guest[k] == nil {
		s.guest[k] = map[string]string{}
	}
	s.guest[k][path] = value
	return nil
}

// SetProjectMetadata sets (or, with an empty value, removes) a key of the project's common instance
// metadata, which the fake reads for EnableGuestAttributes where an instance does not set it.
func (s *Server) SetProjectMetadata(project, key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.projectMeta[project] == nil {
		s.projectMeta[project] = map[string]string{}
	}
	if value == "" {
		delete(s.projectMeta[project], key)
		return
	}
	s.projectMeta[project][key] = value
}

// SetInstanceMetadata changes one key of an instance's metadata at once (empty value: removes it), as a
// user would in the console, with a new fingerprint.
func (s *Server) SetInstanceMetadata(project, zone, name, mdKey, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[key(project, zone, name)]
	if !ok {
		return
	}
	var items []*computepb.Items
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() != mdKey {
			items = append(items, it)
		}
	}
	if value != "" {
		items = append(items, &computepb.Items{Key: proto.String(mdKey), Value: proto.String(value)})
	}
	in.Metadata.Items = items
	in.Metadata.Fingerprint = proto.String(metadataFingerprint(items))
}

// GuestQueryViolations is how many getGuestAttributes queries went beyond the documented rate.
func (s *Server) GuestQueryViolations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.guestViolations
}

// RefusedGuestWrites lists the guest writes refused because guest attributes were off, as
// "project/zone/instance namespace/key".
func (s *Server) RefusedGuestWrites() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refusedGuest...)
}

func key(parts ...string) string { return strings.Join(parts, "/") }

// GuestAttribute reads a guest attribute ("namespace/key") an instance's guest wrote, "" when none.
func (s *Server) GuestAttribute(project, zone, name, path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.guest[key(project, zone, name)][path]
}
