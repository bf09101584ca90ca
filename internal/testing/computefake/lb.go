package computefake

import (
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// The objects of an internal passthrough Network Load Balancer (R34 to R40 in README.md): regional health
// checks, zonal unmanaged instance groups, regional backend services and regional forwarding rules. Each
// refuses what Compute Engine documents it refuses, and an object another one uses cannot be deleted
// (resourceInUseByAnotherResource), so a backend must build and tear them down in their dependency order.

// SubnetworkRange is the range every subnetwork of the fake spans: instances get their internal addresses from
// it (from 10.128.0.1 up), and an internal forwarding rule's address must lie in it (R39). The fake's own
// stand-in: real subnetworks have the ranges their owner gave them.
var SubnetworkRange = netip.MustParsePrefix("10.128.0.0/9")

// MaxForwardingRulePorts is how many ports an internal forwarding rule may list (R39).
const MaxForwardingRulePorts = 5

// group is one unmanaged instance group and the instances it holds (their self links).
type group struct {
	ig      *computepb.InstanceGroup
	members []string
}

// lbState holds the load balancers' objects, by project/scope/name.
type lbState struct {
	healthChecks map[string]*computepb.HealthCheck
	groups       map[string]*group
	services     map[string]*computepb.BackendService
	rules        map[string]*computepb.ForwardingRule
	// unhealthy are the instances (self links) a test marked as failing their health check (SetHealthy).
	unhealthy map[string]bool
	nextVIP   int
}

func (l *lbState) init() {
	if l.healthChecks == nil {
		l.healthChecks, l.groups = map[string]*computepb.HealthCheck{}, map[string]*group{}
		l.services, l.rules, l.unhealthy = map[string]*computepb.BackendService{}, map[string]*computepb.ForwardingRule{}, map[string]bool{}
	}
}

// SetHealthy marks an instance as passing (true, the default) or failing (false) every health check, as a
// proxy whose health port stopped answering would (R38). An instance that is not RUNNING fails them anyway.
func (s *Server) SetHealthy(project, zone, name string, healthy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lb.init()
	link := s.link(project, "zones/"+zone+"/instances/"+name)
	if healthy {
		delete(s.lb.unhealthy, link)
	} else {
		s.lb.unhealthy[link] = true
	}
}

// HealthCheck returns a copy of the stored regional health check, or nil.
func (s *Server) HealthCheck(project, region, name string) *computepb.HealthCheck {
	s.lockLB()
	defer s.mu.Unlock()
	return cloneOrNil(s.lb.healthChecks[key(project, region, name)])
}

// BackendService returns a copy of the stored regional backend service, or nil.
func (s *Server) BackendService(project, region, name string) *computepb.BackendService {
	s.lockLB()
	defer s.mu.Unlock()
	return cloneOrNil(s.lb.services[key(project, region, name)])
}

// ForwardingRule returns a copy of the stored regional forwarding rule, or nil.
func (s *Server) ForwardingRule(project, region, name string) *computepb.ForwardingRule {
	s.lockLB()
	defer s.mu.Unlock()
	return cloneOrNil(s.lb.rules[key(project, region, name)])
}

// InstanceGroup returns a copy of the stored instance group and its instances' self links, or nil.
func (s *Server) InstanceGroup(project, zone, name string) (*computepb.InstanceGroup, []string) {
	s.lockLB()
	defer s.mu.Unlock()
	g, ok := s.lb.groups[key(project, zone, name)]
	if !ok {
		return nil, nil
	}
	return clone(g.ig), append([]string(nil), g.members...)
}

// LoadBalancerObjects lists every load balancer object the fake holds, as "kind project/scope/name", sorted:
// what a test checks is left after a delete.
func (s *Server) LoadBalancerObjects() []string {
	s.lockLB()
	defer s.mu.Unlock()
	var out []string
	for k := range s.lb.healthChecks {
		out = append(out, "healthCheck "+k)
	}
	for k := range s.lb.groups {
		out = append(out, "instanceGroup "+k)
	}
	for k := range s.lb.services {
		out = append(out, "backendService "+k)
	}
	for k := range s.lb.rules {
		out = append(out, "forwardingRule "+k)
	}
	sort.Strings(out)
	return out
}

func cloneOrNil[T proto.Message](m T) T {
	var zero T
	if proto.Equal(m, zero) {
		return zero
	}
	return clone(m)
}

// lockLB takes s.mu for a load balancer handler, with the clock advanced and the state ready; the caller
// releases it.
func (s *Server) lockLB() {
	s.mu.Lock()
	s.advance()
	s.lb.init()
}

// lbRef names one load balancer object: its project, its scope ("regions" or "zones", and which), its kind
// as the API's path spells it, and its name.
type lbRef struct{ project, scopes, scope, kind, name string }

func (r lbRef) key() string    { return key(r.project, r.scope, r.name) }
func (r lbRef) where() string  { return r.scopes + "/" + r.scope }
func (r lbRef) target() string { return r.where() + "/" + r.kind + "/" + r.name }
func (r lbRef) path() string   { return "projects/" + r.project + "/" + r.target() }

// findLB returns the object r names in m; when there is none it answers notFound. The caller holds s.mu.
func findLB[T any](s *Server, w http.ResponseWriter, m map[string]T, r lbRef) (T, bool) {
	v, ok := m[r.key()]
	if !ok {
		s.notFound(w, r.path())
	}
	return v, ok
}

// takenLB answers alreadyExists when m holds an object under r. The caller holds s.mu.
func takenLB[T any](s *Server, w http.ResponseWriter, m map[string]T, r lbRef) bool {
	if _, ok := m[r.key()]; ok {
		s.alreadyExists(w, r.path())
		return true
	}
	return false
}

// insertLB stores v under r in m and answers with its insert operation, done at once. The caller holds s.mu.
func insertLB[T any](s *Server, w http.ResponseWriter, m map[string]T, r lbRef, v T) {
	m[r.key()] = v
	writeProto(w, s.startOp(r.project, r.where(), "insert", r.target(), func() *computepb.Error { return nil }))
}

// deleteLB answers with the delete operation of the object r names, v in m: when it finishes it removes v,
// if v is still the object stored under r (not one deleted and inserted again meanwhile). The caller holds
// s.mu.
func deleteLB[T comparable](s *Server, w http.ResponseWriter, m map[string]T, r lbRef, v T) {
	k := r.key()
	writeProto(w, s.startOp(r.project, r.where(), "delete", r.target(), func() *computepb.Error {
		if cur, ok := m[k]; ok && cur == v {
			delete(m, k)
		}
		return nil
	}))
}

// routeLB serves the load balancers' routes; false when the path is none of theirs. p are the path's segments
// after /compute/v1/projects/.
func (s *Server) routeLB(w http.ResponseWriter, r *http.Request, p []string) bool {
	if len(p) < 4 {
		return false
	}
	project, scope, kind, m := p[0], p[2], p[3], r.Method
	name, verb := "", ""
	if len(p) > 4 {
		name = p[4]
	}
	if len(p) > 5 {
		verb = p[5]
	}
	if len(p) > 6 {
		return false
	}
	switch {
	case p[1] == "regions" && kind == "healthChecks":
		switch {
		case name == "" && m == http.MethodPost:
			s.insertHealthCheck(w, r, project, scope)
		case name != "" && verb == "" && m == http.MethodGet:
			s.getLB(w, project, scope, "healthChecks", name)
		case name != "" && verb == "" && m == http.MethodDelete:
			s.deleteHealthCheck(w, project, scope, name)
		default:
			return false
		}
	case p[1] == "zones" && kind == "instanceGroups":
		switch {
		case name == "" && m == http.MethodPost:
			s.insertGroup(w, r, project, scope)
		case name != "" && verb == "" && m == http.MethodGet:
			s.getLB(w, project, scope, "instanceGroups", name)
		case name != "" && verb == "" && m == http.MethodDelete:
			s.deleteGroup(w, project, scope, name)
		case verb == "addInstances" && m == http.MethodPost:
			s.changeGroup(w, r, project, scope, name, true)
		case verb == "removeInstances" && m == http.MethodPost:
			s.changeGroup(w, r, project, scope, name, false)
		case verb == "listInstances" && m == http.MethodPost:
			s.listGroup(w, r, project, scope, name)
		default:
			return false
		}
	case p[1] == "regions" && kind == "backendServices":
		switch {
		case name == "" && m == http.MethodPost:
			s.insertService(w, r, project, scope)
		case name != "" && verb == "" && m == http.MethodGet:
			s.getLB(w, project, scope, "backendServices", name)
		case name != "" && verb == "" && m == http.MethodDelete:
			s.deleteService(w, project, scope, name)
		case name != "" && verb == "" && m == http.MethodPatch:
			s.patchService(w, r, project, scope, name)
		case verb == "getHealth" && m == http.MethodPost:
			s.getHealth(w, r, project, scope, name)
		default:
			return false
		}
	case p[1] == "regions" && kind == "forwardingRules":
		switch {
		case name == "" && m == http.MethodPost:
			s.insertRule(w, r, project, scope)
		case name == "" && m == http.MethodGet:
			s.listRules(w, r, project, scope)
		case name != "" && verb == "" && m == http.MethodGet:
			s.getLB(w, project, scope, "forwardingRules", name)
		case name != "" && verb == "" && m == http.MethodDelete:
			s.deleteRule(w, project, scope, name)
		case verb == "setLabels" && m == http.MethodPost:
			s.setRuleLabels(w, r, project, scope, name)
		default:
			return false
		}
	default:
		return false
	}
	return true
}

// begin takes the lock and checks the scope and the name every insert carries (R8's rule holds for each of
// these objects' names). On false the answer is written and the lock released.
func (s *Server) begin(w http.ResponseWriter, project, scopeKind, scope, name string) bool {
	s.lockLB()
	ok := false
	if scopeKind == "zones" {
		ok = s.knownZone(w, project, scope)
	} else {
		ok = s.knownRegion(w, project, scope)
	}
	if ok && !nameRE.MatchString(name) {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", name))
		ok = false
	}
	if !ok {
		s.mu.Unlock()
	}
	return ok
}

func (s *Server) alreadyExists(w http.ResponseWriter, path string) {
	writeError(w, http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource '%s' already exists", path))
}

func inUse(w http.ResponseWriter, what, path, user string) {
	writeError(w, http.StatusBadRequest, "resourceInUseByAnotherResource",
		fmt.Sprintf("The %s resource '%s' is already being used by '%s'", what, path, user))
}

func (s *Server) stamp() string { return s.now().Format("2006-01-02T15:04:05.000-07:00") }

// insertHealthCheck is R34.
func (s *Server) insertHealthCheck(w http.ResponseWriter, r *http.Request, project, region string) {
	hc := &computepb.HealthCheck{}
	if !readBody(w, r, hc) || !s.begin(w, project, "regions", region, hc.GetName()) {
		return
	}
	defer s.mu.Unlock()
	var port int32
	switch hc.GetType() {
	case "TCP":
		if hc.HttpHealthCheck != nil {
			writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'resource.httpHealthCheck': a health check of type TCP takes tcpHealthCheck alone.")
			return
		}
		port = hc.GetTcpHealthCheck().GetPort()
	case "HTTP":
		if hc.TcpHealthCheck != nil {
			writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'resource.tcpHealthCheck': a health check of type HTTP takes httpHealthCheck alone.")
			return
		}
		port = hc.GetHttpHealthCheck().GetPort()
		if p := hc.GetHttpHealthCheck().GetRequestPath(); p != "" && !strings.HasPrefix(p, "/") {
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.httpHealthCheck.requestPath': '%s'.", p))
			return
		}
	default:
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.type': '%s'. This fake serves TCP and HTTP health checks.", hc.GetType()))
		return
	}
	if port < 1 || port > 65535 {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.%sHealthCheck.port': '%d'. Must be between 1 and 65535.", strings.ToLower(hc.GetType()), port))
		return
	}
	ref := lbRef{project, "regions", region, "healthChecks", hc.GetName()}
	if takenLB(s, w, s.lb.healthChecks, ref) {
		return
	}
	s.seq++
	hc.Id = proto.Uint64(3_000_000 + s.seq)
	hc.Kind = proto.String("compute#healthCheck")
	hc.Region = proto.String(s.link(project, "regions/"+region))
	hc.SelfLink = proto.String(s.link(project, ref.target()))
	hc.CreationTimestamp = proto.String(s.stamp())
	insertLB(s, w, s.lb.healthChecks, ref, hc)
}

// getLB answers the get of any of the load balancers' objects.
func (s *Server) getLB(w http.ResponseWriter, project, scope, kind, name string) {
	s.lockLB()
	defer s.mu.Unlock()
	k := key(project, scope, name)
	var m proto.Message
	switch kind {
	case "healthChecks":
		if v, ok := s.lb.healthChecks[k]; ok {
			m = v
		}
	case "instanceGroups":
		if g, ok := s.lb.groups[k]; ok {
			g.ig.Size = proto.Int32(int32(len(g.members)))
			m = g.ig
		}
	case "backendServices":
		if v, ok := s.lb.services[k]; ok {
			m = v
		}
	case "forwardingRules":
		if v, ok := s.lb.rules[k]; ok {
			m = v
		}
	}
	if m == nil {
		scopes := "regions"
		if kind == "instanceGroups" {
			scopes = "zones"
		}
		s.notFound(w, lbRef{project, scopes, scope, kind, name}.path())
		return
	}
	writeProto(w, m)
}

func (s *Server) deleteHealthCheck(w http.ResponseWriter, project, region, name string) {
	s.lockLB()
	defer s.mu.Unlock()
	ref := lbRef{project, "regions", region, "healthChecks", name}
	hc, ok := findLB(s, w, s.lb.healthChecks, ref)
	if !ok {
		return
	}
	for _, bs := range s.sortedServices() {
		for _, h := range bs.GetHealthChecks() {
			if sameLink(h, hc.GetSelfLink()) {
				inUse(w, "healthCheck", ref.path(), bs.GetSelfLink())
				return
			}
		}
	}
	deleteLB(s, w, s.lb.healthChecks, ref, hc)
}

// sameLink compares two references to one object: full URLs, or paths from "projects/" or from the scope.
func sameLink(a, b string) bool {
	trim := func(l string) string {
		if i := strings.Index(l, "projects/"); i >= 0 {
			return l[i:]
		}
		return l
	}
	ta, tb := trim(a), trim(b)
	return ta == tb || strings.HasSuffix(ta, "/"+tb) || strings.HasSuffix(tb, "/"+ta)
}

func (s *Server) sortedServices() []*computepb.BackendService {
	var out []*computepb.BackendService
	for _, bs := range s.lb.services {
		out = append(out, bs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetSelfLink() < out[j].GetSelfLink() })
	return out
}

// networkOf is a network reference's name: the fake knows only VPC networks by name, "default" when none is
// given (as an instance without one is on the default network).
func networkOf(link string) string {
	if link == "" {
		return "default"
	}
	return lastPart(link)
}

// insertGroup is R35's insert: an unmanaged instance group of one zone, on one network.
func (s *Server) insertGroup(w http.ResponseWriter, r *http.Request, project, zone string) {
	ig := &computepb.InstanceGroup{}
	if !readBody(w, r, ig) || !s.begin(w, project, "zones", zone, ig.GetName()) {
		return
	}
	defer s.mu.Unlock()
	ref := lbRef{project, "zones", zone, "instanceGroups", ig.GetName()}
	if takenLB(s, w, s.lb.groups, ref) {
		return
	}
	s.seq++
	ig.Id = proto.Uint64(4_000_000 + s.seq)
	ig.Kind = proto.String("compute#instanceGroup")
	ig.Zone = proto.String(s.link(project, "zones/"+zone))
	ig.SelfLink = proto.String(s.link(project, ref.target()))
	ig.CreationTimestamp = proto.String(s.stamp())
	ig.Fingerprint = proto.String(fingerprint(ig.GetNamedPorts()))
	if ig.Network != nil {
		ig.Network = proto.String(s.link(project, "global/networks/"+networkOf(ig.GetNetwork())))
	}
	g := &group{ig: ig}
	insertLB(s, w, s.lb.groups, ref, g)
}

// groupUser is the backend service that uses a group, "" when none does. The caller holds s.mu.
func (s *Server) groupUser(g *group) string {
	for _, bs := range s.sortedServices() {
		for _, be := range bs.GetBackends() {
			if sameLink(be.GetGroup(), g.ig.GetSelfLink()) {
				return bs.GetSelfLink()
			}
		}
	}
	return ""
}

func (s *Server) deleteGroup(w http.ResponseWriter, project, zone, name string) {
	s.lockLB()
	defer s.mu.Unlock()
	ref := lbRef{project, "zones", zone, "instanceGroups", name}
	g, ok := findLB(s, w, s.lb.groups, ref)
	if !ok {
		return
	}
	if user := s.groupUser(g); user != "" {
		inUse(w, "instanceGroup", ref.path(), user)
		return
	}
	deleteLB(s, w, s.lb.groups, ref, g)
}

// changeGroup is addInstances and removeInstances (R35): the instances must exist in the group's zone and
// network, and an instance can be in one load-balanced group only.
func (s *Server) changeGroup(w http.ResponseWriter, r *http.Request, project, zone, name string, add bool) {
	var refs []*computepb.InstanceReference
	if add {
		req := &computepb.InstanceGroupsAddInstancesRequest{}
		if !readBody(w, r, req) {
			return
		}
		refs = req.GetInstances()
	} else {
		req := &computepb.InstanceGroupsRemoveInstancesRequest{}
		if !readBody(w, r, req) {
			return
		}
		refs = req.GetInstances()
	}
	s.lockLB()
	defer s.mu.Unlock()
	g, ok := findLB(s, w, s.lb.groups, lbRef{project, "zones", zone, "instanceGroups", name})
	if !ok {
		return
	}
	if len(refs) == 0 {
		writeError(w, http.StatusBadRequest, "required", "Required field 'resource.instances' not specified")
		return
	}
	network := ""
	if g.ig.Network != nil {
		network = networkOf(g.ig.GetNetwork())
	}
	var links []string
	for i, ref := range refs {
		field := fmt.Sprintf("resource.instances[%d].instance", i)
		var in *computepb.Instance
		for _, cand := range s.instances {
			if sameLink(ref.GetInstance(), cand.GetSelfLink()) {
				in = cand
			}
		}
		if in == nil {
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field '%s': '%s'. The resource was not found.", field, ref.GetInstance()))
			return
		}
		if lastPart(in.GetZone()) != zone {
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field '%s': '%s'. Instance must be in zone '%s'.", field, ref.GetInstance(), zone))
			return
		}
		member := false
		for _, l := range g.members {
			member = member || l == in.GetSelfLink()
		}
		if !add {
			if !member {
				writeError(w, http.StatusBadRequest, "memberNotFound", fmt.Sprintf("The instance '%s' is not a member of instance group '%s'.", in.GetSelfLink(), name))
				return
			}
			links = append(links, in.GetSelfLink())
			continue
		}
		if member {
			writeError(w, http.StatusBadRequest, "memberAlreadyExists", fmt.Sprintf("The instance '%s' is already a member of instance group '%s'.", in.GetSelfLink(), name))
			return
		}
		nicNet := networkOf(in.GetNetworkInterfaces()[0].GetNetwork())
		if network != "" && nicNet != network {
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field '%s': '%s'. Instance is in network '%s', the instance group in network '%s'.", field, ref.GetInstance(), nicNet, network))
			return
		}
		network = nicNet
		if s.groupUser(g) != "" {
			if other := s.loadBalancedGroupOf(in.GetSelfLink(), g); other != "" {
				writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field '%s': '%s'. The instance is already a member of load-balanced instance group '%s'.", field, ref.GetInstance(), other))
				return
			}
		}
		links = append(links, in.GetSelfLink())
	}
	verb := "removeInstances"
	if add {
		verb = "addInstances"
	}
	writeProto(w, s.startOp(project, "zones/"+zone, verb, "zones/"+zone+"/instanceGroups/"+name, func() *computepb.Error {
		if add {
			if g.ig.Network == nil {
				g.ig.Network = proto.String(s.link(project, "global/networks/"+network))
			}
			g.members = append(g.members, links...)
			return nil
		}
		var kept []string
		for _, l := range g.members {
			gone := false
			for _, x := range links {
				gone = gone || x == l
			}
			if !gone {
				kept = append(kept, l)
			}
		}
		g.members = kept
		return nil
	}))
}

// loadBalancedGroupOf names another group than g that holds the instance and that a backend service uses,
// "" when there is none. The caller holds s.mu.
func (s *Server) loadBalancedGroupOf(instance string, g *group) string {
	for _, gk := range sortedKeys(s.lb.groups) {
		other := s.lb.groups[gk]
		if other == g || s.groupUser(other) == "" {
			continue
		}
		for _, l := range other.members {
			if l == instance {
				return other.ig.GetSelfLink()
			}
		}
	}
	return ""
}

// dropMember takes a deleted instance out of every group, as Compute Engine does. The caller holds s.mu.
func (s *Server) dropMember(link string) {
	s.lb.init()
	for _, g := range s.lb.groups {
		var kept []string
		for _, l := range g.members {
			if l != link {
				kept = append(kept, l)
			}
		}
		g.members = kept
	}
	delete(s.lb.unhealthy, link)
}

func (s *Server) listGroup(w http.ResponseWriter, r *http.Request, project, zone, name string) {
	req := &computepb.InstanceGroupsListInstancesRequest{}
	if !readBody(w, r, req) {
		return
	}
	s.lockLB()
	defer s.mu.Unlock()
	g, ok := findLB(s, w, s.lb.groups, lbRef{project, "zones", zone, "instanceGroups", name})
	if !ok {
		return
	}
	out := &computepb.InstanceGroupsListInstances{Kind: proto.String("compute#instanceGroupsListInstances")}
	for _, l := range g.members {
		status := ""
		for _, in := range s.instances {
			if in.GetSelfLink() == l {
				status = in.GetStatus()
			}
		}
		if req.GetInstanceState() == "RUNNING" && status != "RUNNING" {
			continue
		}
		out.Items = append(out.Items, &computepb.InstanceWithNamedPorts{Instance: proto.String(l), Status: proto.String(status)})
	}
	writeProto(w, out)
}

// insertService is R36: an INTERNAL backend service for TCP, with one health check of its region and
// instance groups of its region's zones, in CONNECTION balancing mode.
func (s *Server) insertService(w http.ResponseWriter, r *http.Request, project, region string) {
	bs := &computepb.BackendService{}
	if !readBody(w, r, bs) || !s.begin(w, project, "regions", region, bs.GetName()) {
		return
	}
	defer s.mu.Unlock()
	bad := invalidField(w)
	if bs.GetLoadBalancingScheme() != "INTERNAL" {
		bad("loadBalancingScheme", bs.GetLoadBalancingScheme(), "This fake serves the INTERNAL scheme (internal passthrough Network Load Balancers) alone.")
		return
	}
	if bs.GetProtocol() != "TCP" {
		bad("protocol", bs.GetProtocol(), "This fake serves TCP backend services alone.")
		return
	}
	if len(bs.GetHealthChecks()) != 1 {
		bad("healthChecks", strings.Join(bs.GetHealthChecks(), ","), "A backend service of an internal passthrough Network Load Balancer needs exactly one health check.")
		return
	}
	found := false
	for _, hc := range s.lb.healthChecks {
		found = found || (sameLink(bs.GetHealthChecks()[0], hc.GetSelfLink()) && strings.HasSuffix(hc.GetRegion(), "/regions/"+region))
	}
	if !found {
		bad("healthChecks[0]", bs.GetHealthChecks()[0], "The health check was not found in region '"+region+"'.")
		return
	}
	if !s.checkBackends(bad, bs.GetBackends(), region) {
		return
	}
	ref := lbRef{project, "regions", region, "backendServices", bs.GetName()}
	if takenLB(s, w, s.lb.services, ref) {
		return
	}
	s.seq++
	bs.Id = proto.Uint64(5_000_000 + s.seq)
	bs.Kind = proto.String("compute#backendService")
	bs.Region = proto.String(s.link(project, "regions/"+region))
	bs.SelfLink = proto.String(s.link(project, ref.target()))
	bs.CreationTimestamp = proto.String(s.stamp())
	bs.Fingerprint = proto.String(fingerprint(bs.GetBackends()))
	insertLB(s, w, s.lb.services, ref, bs)
}

func (s *Server) deleteService(w http.ResponseWriter, project, region, name string) {
	s.lockLB()
	defer s.mu.Unlock()
	ref := lbRef{project, "regions", region, "backendServices", name}
	bs, ok := findLB(s, w, s.lb.services, ref)
	if !ok {
		return
	}
	for _, rk := range sortedKeys(s.lb.rules) {
		if fr := s.lb.rules[rk]; sameLink(fr.GetBackendService(), bs.GetSelfLink()) {
			inUse(w, "backendService", ref.path(), fr.GetSelfLink())
			return
		}
	}
	deleteLB(s, w, s.lb.services, ref, bs)
}

// getHealth is R38: each instance of the group, HEALTHY when it is RUNNING and not marked unhealthy
// (SetHealthy), UNHEALTHY otherwise; the group must be a backend of the service.
func (s *Server) getHealth(w http.ResponseWriter, r *http.Request, project, region, name string) {
	req := &computepb.ResourceGroupReference{}
	if !readBody(w, r, req) {
		return
	}
	s.lockLB()
	defer s.mu.Unlock()
	bs, ok := findLB(s, w, s.lb.services, lbRef{project, "regions", region, "backendServices", name})
	if !ok {
		return
	}
	var g *group
	for _, be := range bs.GetBackends() {
		for _, cand := range s.lb.groups {
			if sameLink(be.GetGroup(), cand.ig.GetSelfLink()) && sameLink(req.GetGroup(), cand.ig.GetSelfLink()) {
				g = cand
			}
		}
	}
	if g == nil {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.group': '%s'. Not a backend of backend service '%s'.", req.GetGroup(), name))
		return
	}
	out := &computepb.BackendServiceGroupHealth{Kind: proto.String("compute#backendServiceGroupHealth")}
	for _, l := range g.members {
		var in *computepb.Instance
		for _, cand := range s.instances {
			if cand.GetSelfLink() == l {
				in = cand
			}
		}
		if in == nil {
			continue
		}
		state := "HEALTHY"
		if in.GetStatus() != "RUNNING" || s.lb.unhealthy[l] {
			state = "UNHEALTHY"
		}
		out.HealthStatus = append(out.HealthStatus, &computepb.HealthStatus{
			Instance: proto.String(l), IpAddress: proto.String(in.GetNetworkInterfaces()[0].GetNetworkIP()), HealthState: proto.String(state),
		})
	}
	writeProto(w, out)
}

// insertRule is R39: an INTERNAL forwarding rule for a backend service of its region, TCP, up to five ports
// or all ports, with an internal address of the subnetwork, given or allocated.
func (s *Server) insertRule(w http.ResponseWriter, r *http.Request, project, region string) {
	fr := &computepb.ForwardingRule{}
	if !readBody(w, r, fr) || !s.begin(w, project, "regions", region, fr.GetName()) {
		return
	}
	defer s.mu.Unlock()
	bad := invalidField(w)
	if fr.GetLoadBalancingScheme() != "INTERNAL" {
		bad("loadBalancingScheme", fr.GetLoadBalancingScheme(), "This fake serves the INTERNAL scheme (internal passthrough Network Load Balancers) alone.")
		return
	}
	var bs *computepb.BackendService
	for _, cand := range s.lb.services {
		if fr.GetBackendService() != "" && sameLink(fr.GetBackendService(), cand.GetSelfLink()) && strings.HasSuffix(cand.GetRegion(), "/regions/"+region) {
			bs = cand
		}
	}
	if bs == nil {
		bad("backendService", fr.GetBackendService(), "An INTERNAL forwarding rule needs a backend service of region '"+region+"'.")
		return
	}
	if fr.Target != nil {
		bad("target", fr.GetTarget(), "An INTERNAL forwarding rule takes a backend service, not a target.")
		return
	}
	if p := fr.GetIPProtocol(); p != "" && p != bs.GetProtocol() {
		bad("IPProtocol", p, "The forwarding rule's protocol must be its backend service's ("+bs.GetProtocol()+").")
		return
	}
	switch {
	case fr.GetAllPorts() && (len(fr.GetPorts()) > 0 || fr.PortRange != nil):
		bad("allPorts", "true", "allPorts excludes ports and portRange.")
		return
	case !fr.GetAllPorts() && len(fr.GetPorts()) == 0:
		bad("ports", "", "An INTERNAL forwarding rule needs ports (at most 5) or allPorts.")
		return
	case len(fr.GetPorts()) > MaxForwardingRulePorts:
		bad("ports", strings.Join(fr.GetPorts(), ","), fmt.Sprintf("At most %d ports may be given; use allPorts for more.", MaxForwardingRulePorts))
		return
	case fr.PortRange != nil:
		bad("portRange", fr.GetPortRange(), "An INTERNAL forwarding rule takes ports, not portRange.")
		return
	}
	for _, p := range fr.GetPorts() {
		var n int
		if _, err := fmt.Sscanf(p, "%d", &n); err != nil || fmt.Sprint(n) != p || n < 1 || n > 65535 {
			bad("ports", p, "Each port is a number from 1 to 65535.")
			return
		}
	}
	if e := checkLabels(fr.GetLabels(), "resource.labels"); e != nil {
		writeError(w, e.status, e.reason, e.message)
		return
	}
	ref := lbRef{project, "regions", region, "forwardingRules", fr.GetName()}
	if takenLB(s, w, s.lb.rules, ref) {
		return
	}
	if ip := fr.GetIPAddress(); ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil || !SubnetworkRange.Contains(a) {
			bad("IPAddress", ip, "The address must be an internal address of the subnetwork ("+SubnetworkRange.String()+").")
			return
		}
		if s.internalInUse(ip) {
			bad("IPAddress", ip, "The address is already in use.")
			return
		}
	} else {
		for {
			s.lb.nextVIP++
			ip = fmt.Sprintf("10.250.%d.%d", s.lb.nextVIP/250%256, s.lb.nextVIP%250+1)
			if !s.internalInUse(ip) {
				break
			}
		}
		fr.IPAddress = proto.String(ip)
	}
	s.seq++
	fr.Id = proto.Uint64(6_000_000 + s.seq)
	fr.Kind = proto.String("compute#forwardingRule")
	fr.IPProtocol = proto.String(bs.GetProtocol())
	fr.Region = proto.String(s.link(project, "regions/"+region))
	fr.SelfLink = proto.String(s.link(project, ref.target()))
	fr.CreationTimestamp = proto.String(s.stamp())
	fr.BackendService = proto.String(bs.GetSelfLink())
	fr.LabelFingerprint = proto.String(labelFingerprint(fr.GetLabels()))
	fr.Fingerprint = proto.String(fingerprint(fr.GetName()))
	if fr.Network == nil {
		fr.Network = proto.String(s.link(project, "global/networks/default"))
	}
	insertLB(s, w, s.lb.rules, ref, fr)
}

// internalInUse reports whether an instance or a forwarding rule has the internal address. The caller holds s.mu.
func (s *Server) internalInUse(ip string) bool {
	for _, in := range s.instances {
		for _, nic := range in.GetNetworkInterfaces() {
			if nic.GetNetworkIP() == ip {
				return true
			}
		}
	}
	for _, fr := range s.lb.rules {
		if fr.GetIPAddress() == ip {
			return true
		}
	}
	return false
}

func (s *Server) deleteRule(w http.ResponseWriter, project, region, name string) {
	s.lockLB()
	defer s.mu.Unlock()
	ref := lbRef{project, "regions", region, "forwardingRules", name}
	fr, ok := findLB(s, w, s.lb.rules, ref)
	if !ok {
		return
	}
	deleteLB(s, w, s.lb.rules, ref, fr)
}

// setRuleLabels is R40: the labels' rules of R13, with the current label fingerprint.
func (s *Server) setRuleLabels(w http.ResponseWriter, r *http.Request, project, region, name string) {
	req := &computepb.RegionSetLabelsRequest{}
	if !readBody(w, r, req) {
		return
	}
	s.lockLB()
	defer s.mu.Unlock()
	ref := lbRef{project, "regions", region, "forwardingRules", name}
	fr, ok := findLB(s, w, s.lb.rules, ref)
	if !ok {
		return
	}
	if e := checkLabels(req.GetLabels(), "resource.labels"); e != nil {
		writeError(w, e.status, e.reason, e.message)
		return
	}
	if req.GetLabelFingerprint() != fr.GetLabelFingerprint() {
		writeError(w, http.StatusPreconditionFailed, "conditionNotMet", "Labels fingerprint either invalid or resource labels have changed")
		return
	}
	labels := req.GetLabels()
	writeProto(w, s.startOp(project, ref.where(), "setLabels", ref.target(), func() *computepb.Error {
		fr.Labels = labels
		fr.LabelFingerprint = proto.String(labelFingerprint(labels))
		return nil
	}))
}

// ruleFilterable lets a list filter read a forwarding rule (which has no status).
type ruleFilterable struct{ *computepb.ForwardingRule }

func (ruleFilterable) GetStatus() string { return "" }

func (s *Server) listRules(w http.ResponseWriter, r *http.Request, project, region string) {
	f, err := parseFilter(r.URL.Query().Get("filter"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'filter': "+err.Error())
		return
	}
	s.lockLB()
	defer s.mu.Unlock()
	if !s.knownRegion(w, project, region) {
		return
	}
	var all []*computepb.ForwardingRule
	for k, fr := range s.lb.rules {
		if strings.HasPrefix(k, project+"/"+region+"/") && f.match(ruleFilterable{fr}) {
			all = append(all, fr)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].GetName() < all[j].GetName() })
	from, to, next, ok := pageOf(w, r, len(all))
	if !ok {
		return
	}
	out := &computepb.ForwardingRuleList{Kind: proto.String("compute#forwardingRuleList"), Items: all[from:to]}
	if next != "" {
		out.NextPageToken = proto.String(next)
	}
	writeProto(w, out)
}

// aggregatedRules lists the project's forwarding rules matching the filter, by region, as R22 lists instances.
func (s *Server) aggregatedRules(w http.ResponseWriter, r *http.Request, project string) {
	f, err := parseFilter(r.URL.Query().Get("filter"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'filter': "+err.Error())
		return
	}
	s.lockLB()
	defer s.mu.Unlock()
	var all []*computepb.ForwardingRule
	for k, fr := range s.lb.rules {
		if strings.HasPrefix(k, project+"/") && f.match(ruleFilterable{fr}) {
			all = append(all, fr)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].GetSelfLink() < all[j].GetSelfLink() })
	from, to, next, ok := pageOf(w, r, len(all))
	if !ok {
		return
	}
	out := &computepb.ForwardingRuleAggregatedList{Kind: proto.String("compute#forwardingRuleAggregatedList"), Items: map[string]*computepb.ForwardingRulesScopedList{}}
	for _, region := range s.zones {
		out.Items["regions/"+region] = &computepb.ForwardingRulesScopedList{}
	}
	for _, fr := range all[from:to] {
		region := "regions/" + lastPart(fr.GetRegion())
		out.Items[region].ForwardingRules = append(out.Items[region].ForwardingRules, fr)
	}
	for region, scope := range out.Items {
		if len(scope.ForwardingRules) == 0 {
			scope.Warning = &computepb.Warning{Code: proto.String("NO_RESULTS_ON_PAGE"), Message: proto.String("There are no results for scope '" + region + "' on this page."),
				Data: []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(region)}}}
		}
	}
	if next != "" {
		out.NextPageToken = proto.String(next)
	}
	writeProto(w, out)
}

// checkBackends is R36's rule on a service's backends: instance groups of the region's zones, each once, in
// CONNECTION balancing mode (the default, filled in), none with an instance another load-balanced group
// holds. It answers the first refusal through bad. The caller holds s.mu.
func (s *Server) checkBackends(bad func(field, value, why string), backends []*computepb.Backend, region string) bool {
	seen := map[string]bool{}
	for i, be := range backends {
		var g *group
		for _, cand := range s.lb.groups {
			if sameLink(be.GetGroup(), cand.ig.GetSelfLink()) {
				g = cand
			}
		}
		field := fmt.Sprintf("backends[%d].group", i)
		switch {
		case g == nil:
			bad(field, be.GetGroup(), "The instance group was not found.")
			return false
		case RegionOf(lastPart(g.ig.GetZone())) != region:
			bad(field, be.GetGroup(), "The instance group must be in a zone of region '"+region+"'.")
			return false
		case seen[g.ig.GetSelfLink()]:
			bad(field, be.GetGroup(), "Duplicate backend group.")
			return false
		case be.BalancingMode != nil && be.GetBalancingMode() != "CONNECTION":
			bad(fmt.Sprintf("backends[%d].balancingMode", i), be.GetBalancingMode(), "Internal passthrough Network Load Balancers support CONNECTION alone.")
			return false
		}
		for _, l := range g.members {
			if other := s.loadBalancedGroupOf(l, g); other != "" {
				bad(field, be.GetGroup(), fmt.Sprintf("Instance '%s' is already a member of load-balanced instance group '%s'.", l, other))
				return false
			}
		}
		seen[g.ig.GetSelfLink()] = true
		if be.BalancingMode == nil {
			be.BalancingMode = proto.String("CONNECTION")
		}
	}
	return true
}

// patchService is R36's patch: the service's backends replaced by those the body lists, checked as an
// insert's are, given the service's current fingerprint (412 conditionNotMet otherwise: "An up-to-date
// fingerprint must be provided in order to update the BackendService"). The fake patches backends alone; a
// body that changes another field is refused as its own limit.
func (s *Server) patchService(w http.ResponseWriter, r *http.Request, project, region, name string) {
	req := &computepb.BackendService{}
	if !readBody(w, r, req) {
		return
	}
	s.lockLB()
	defer s.mu.Unlock()
	ref := lbRef{project, "regions", region, "backendServices", name}
	bs, ok := findLB(s, w, s.lb.services, ref)
	if !ok {
		return
	}
	if req.GetFingerprint() != bs.GetFingerprint() {
		writeError(w, http.StatusPreconditionFailed, "conditionNotMet", "Supplied fingerprint does not match current fingerprint.")
		return
	}
	bad := invalidField(w)
	rest := clone(req)
	rest.Backends, rest.Fingerprint = nil, nil
	if rest.Name != nil && rest.GetName() != name {
		bad("name", rest.GetName(), "The name of a backend service cannot change.")
		return
	}
	rest.Name = nil
	if !proto.Equal(rest, &computepb.BackendService{}) {
		bad("resource", name, "This fake patches a backend service's backends alone.")
		return
	}
	if !s.checkBackends(bad, req.GetBackends(), region) {
		return
	}
	next := clone(bs)
	next.Backends = req.GetBackends()
	next.Fingerprint = proto.String(fingerprint(next.GetBackends()))
	s.lb.services[ref.key()] = next
	writeProto(w, s.startOp(project, ref.where(), "patch", ref.target(), func() *computepb.Error { return nil }))
}

// invalidField answers w with Compute Engine's refusal of a field's value (400 invalid), shaped as R21's.
func invalidField(w http.ResponseWriter) func(field, value, why string) {
	return func(field, value, why string) {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.%s': '%s'. %s", field, value, why))
	}
}
