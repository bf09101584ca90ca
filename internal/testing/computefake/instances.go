package computefake

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// machineCPUs is the vCPU count the CPUS quota charges for the machine types tests use.
var machineCPUs = map[string]float64{"e2-micro": 2, "e2-small": 2, "e2-medium": 2, "n1-standard-1": 1, "n2-standard-2": 2, "e2-standard-4": 4}

func fingerprint(v any) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%v", v))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

func metadataFingerprint(items []*computepb.Items) string {
	var parts []string
	for _, it := range items {
		parts = append(parts, it.GetKey()+"="+it.GetValue())
	}
	sort.Strings(parts)
	return fingerprint(parts)
}

func labelFingerprint(labels map[string]string) string {
	var parts []string
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return fingerprint(parts)
}

func (s *Server) notFound(w http.ResponseWriter, what string) {
	writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource '%s' was not found", what))
}

func (s *Server) knownZone(w http.ResponseWriter, project, zone string) bool {
	if _, ok := s.zones[zone]; !ok {
		s.notFound(w, "projects/"+project+"/zones/"+zone)
		return false
	}
	return true
}

func (s *Server) insertInstance(w http.ResponseWriter, r *http.Request, project, zone string) {
	in := &computepb.Instance{}
	if !readBody(w, r, in) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if !s.knownZone(w, project, zone) {
		return
	}
	name := in.GetName()
	if !nameRE.MatchString(name) {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", name))
		return
	}
	k := key(project, zone, name)
	if _, ok := s.instances[k]; ok {
		writeError(w, http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' already exists", project, zone, name))
		return
	}
	mt := in.GetMachineType()
	mtName := mt[strings.LastIndexByte(mt, '/')+1:]
	cpus, ok := machineCPUs[mtName]
	if !ok || !strings.Contains(mt, "zones/"+zone+"/machineTypes/") {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.machineType': '%s'. Machine type with name '%s' does not exist in zone '%s'.", mt, mtName, zone))
		return
	}
	if len(in.GetDisks()) != 1 || in.GetDisks()[0].GetInitializeParams().GetSourceImage() == "" {
		writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'resource.disks': one boot disk with initializeParams.sourceImage is required by this fake.")
		return
	}
	if len(in.GetNetworkInterfaces()) != 1 {
		writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'resource.networkInterfaces': exactly one is required by this fake.")
		return
	}
	for _, e := range []*apiError{
		checkLabels(in.GetLabels(), "resource.labels"),
		checkLabels(in.GetDisks()[0].GetInitializeParams().GetLabels(), "resource.disks[0].initializeParams.labels"),
		checkMetadata(in.GetMetadata().GetItems(), "resource.metadata"),
		s.externalIPViolation(project, zone, in),
	} {
		if e != nil {
			writeError(w, e.status, e.reason, e.message)
			return
		}
	}
	region := s.zones[zone]
	nic := in.GetNetworkInterfaces()[0]
	var natAddr *computepb.Address
	for _, ac := range nic.GetAccessConfigs() {
		if ip := ac.GetNatIP(); ip != "" {
			for _, a := range s.addresses {
				if a.GetAddress() == ip && strings.HasSuffix(a.GetRegion(), "/regions/"+region) {
					natAddr = a
				}
			}
			if natAddr == nil || natAddr.GetStatus() != "RESERVED" {
				writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.networkInterfaces[0].accessConfigs[0].natIP': '%s'. The specified external IP address '%s' was not found in region '%s' or is in use.", ip, ip, region))
				return
			}
		}
	}
	// The instance exists, PROVISIONING, from the moment the insert is accepted; the operation decides its fate.
	s.seq++
	s.nextHost++
	in.Id = proto.Uint64(1_000_000 + s.seq)
	in.Zone = proto.String(s.link(project, "zones/"+zone))
	in.SelfLink = proto.String(s.link(project, "zones/"+zone+"/instances/"+name))
	in.CreationTimestamp = proto.String(s.now().Format("2006-01-02T15:04:05.000-07:00"))
	in.Status = proto.String("PROVISIONING")
	in.Kind = proto.String("compute#instance")
	for _, sa := range in.GetServiceAccounts() {
		if sa.GetEmail() == "default" {
			// R27: the alias is stored as the account it stands for.
			sa.Email = proto.String(DefaultServiceAccountEmail(project))
		}
	}
	in.LabelFingerprint = proto.String(labelFingerprint(in.GetLabels()))
	if in.Metadata == nil {
		in.Metadata = &computepb.Metadata{}
	}
	in.Metadata.Fingerprint = proto.String(metadataFingerprint(in.Metadata.GetItems()))
	in.Metadata.Kind = proto.String("compute#metadata")
	nic.NetworkIP = proto.String(fmt.Sprintf("10.%d.%d.%d", 128+s.nextHost/65536%64, s.nextHost/256%256, s.nextHost%256))
	nic.Name = proto.String("nic0")
	for _, ac := range nic.GetAccessConfigs() {
		if ac.GetNatIP() == "" {
			// Addresses of the kind Compute Engine hands out (Google's own, globally reachable): a documentation
			// range would be refused by the proxy's destination guards anyway, and the guest test's check that
			// the guest refuses its own external address would prove nothing.
			ac.NatIP = proto.String(fmt.Sprintf("34.118.%d.%d", s.nextHost/256%256, s.nextHost%256))
		}
	}
	k2 := k
	s.instances[k] = in
	check := s.quotaCheck(project, zone, region, cpus, in)
	op := s.startOp(project, "zones/"+zone, "insert", "zones/"+zone+"/instances/"+name, func() *computepb.Error {
		cur, ok := s.instances[k2]
		if !ok || cur != in {
			return nil
		}
		if check != nil {
			delete(s.instances, k2)
			return check
		}
		cur.Status = proto.String("RUNNING")
		cur.LastStartTimestamp = proto.String(s.now().Format(time.RFC3339))
		if natAddr != nil {
			natAddr.Status = proto.String("IN_USE")
			natAddr.Users = []string{cur.GetSelfLink()}
		}
		return nil
	})
	writeProto(w, op)
}

// quotaCheck decides at insert time whether the instance fits, counting what the region already holds.
func (s *Server) quotaCheck(project, zone, region string, cpus float64, self *computepb.Instance) *computepb.Error {
	if s.exhausted[zone] {
		return opError("ZONE_RESOURCE_POOL_EXHAUSTED",
			fmt.Sprintf("The zone 'projects/%s/zones/%s' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.", project, zone))
	}
	limits := s.quotas[region]
	usage := s.usage(project, region, self)
	for _, metric := range []string{"CPUS", "INSTANCES"} {
		limit, ok := limits[metric]
		if !ok {
			continue
		}
		need := usage[metric] + 1
		if metric == "CPUS" {
			need = usage[metric] + cpus
		}
		if need > limit {
			return opError("QUOTA_EXCEEDED", fmt.Sprintf("Quota '%s' exceeded.  Limit: %.1f in region %s.", metric, limit, region),
				&computepb.ErrorDetails{QuotaInfo: &computepb.QuotaExceededInfo{
					MetricName: proto.String("compute.googleapis.com/" + strings.ToLower(metric)),
					LimitName:  proto.String(metric + "-per-project-region"),
					Limit:      proto.Float64(limit),
					Dimensions: map[string]string{"region": region},
				}})
		}
	}
	return nil
}

// usage counts the region's instances (other than self), their CPUs and its addresses.
func (s *Server) usage(project, region string, self *computepb.Instance) map[string]float64 {
	u := map[string]float64{}
	for k, in := range s.instances {
		if in == self || !strings.HasPrefix(k, project+"/") || s.zones[strings.Split(k, "/")[1]] != region {
			continue
		}
		mt := in.GetMachineType()
		u["INSTANCES"]++
		u["CPUS"] += machineCPUs[mt[strings.LastIndexByte(mt, '/')+1:]]
	}
	for k := range s.addresses {
		if strings.HasPrefix(k, project+"/"+region+"/") {
			u["STATIC_ADDRESSES"]++
		}
	}
	return u
}

func (s *Server) getInstance(w http.ResponseWriter, project, zone, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	in, ok := s.instances[key(project, zone, name)]
	if !ok {
		s.notFound(w, "projects/"+project+"/zones/"+zone+"/instances/"+name)
		return
	}
	writeProto(w, in)
}

func (s *Server) deleteInstance(w http.ResponseWriter, project, zone, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	k := key(project, zone, name)
	in, ok := s.instances[k]
	if !ok {
		s.notFound(w, "projects/"+project+"/zones/"+zone+"/instances/"+name)
		return
	}
	in.Status = proto.String("STOPPING")
	op := s.startOp(project, "zones/"+zone, "delete", "zones/"+zone+"/instances/"+name, func() *computepb.Error {
		if cur, ok := s.instances[k]; ok && cur == in {
			s.releaseAddresses(in)
			s.dropMember(in.GetSelfLink())
			delete(s.instances, k)
			delete(s.guest, k)
			delete(s.guestQueries, k)
		}
		return nil
	})
	writeProto(w, op)
}

// releaseAddresses returns the static addresses an instance used to RESERVED. The caller holds s.mu.
func (s *Server) releaseAddresses(in *computepb.Instance) {
	for _, a := range s.addresses {
		if len(a.Users) == 1 && a.Users[0] == in.GetSelfLink() {
			a.Users = nil
			a.Status = proto.String("RESERVED")
		}
	}
}

func (s *Server) lookup(w http.ResponseWriter, project, zone, name string) (*computepb.Instance, bool) {
	s.advance()
	in, ok := s.instances[key(project, zone, name)]
	if !ok {
		s.notFound(w, "projects/"+project+"/zones/"+zone+"/instances/"+name)
	}
	return in, ok
}

func (s *Server) setLabels(w http.ResponseWriter, r *http.Request, project, zone, name string) {
	req := &computepb.InstancesSetLabelsRequest{}
	if !readBody(w, r, req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.lookup(w, project, zone, name)
	if !ok {
		return
	}
	if e := checkLabels(req.GetLabels(), "resource.labels"); e != nil {
		writeError(w, e.status, e.reason, e.message)
		return
	}
	if req.GetLabelFingerprint() != in.GetLabelFingerprint() {
		writeError(w, http.StatusPreconditionFailed, "conditionNotMet", "Labels fingerprint either invalid or resource labels have changed")
		return
	}
	labels := req.GetLabels()
	op := s.startOp(project, "zones/"+zone, "setLabels", "zones/"+zone+"/instances/"+name, func() *computepb.Error {
		in.Labels = labels
		in.LabelFingerprint = proto.String(labelFingerprint(labels))
		return nil
	})
	writeProto(w, op)
}

func (s *Server) setMetadata(w http.ResponseWriter, r *http.Request, project, zone, name string) {
	req := &computepb.Metadata{}
	if !readBody(w, r, req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.lookup(w, project, zone, name)
	if !ok {
		return
	}
	if e := checkMetadata(req.GetItems(), "resource"); e != nil {
		writeError(w, e.status, e.reason, e.message)
		return
	}
	if req.GetFingerprint() != in.GetMetadata().GetFingerprint() {
		writeError(w, http.StatusPreconditionFailed, "conditionNotMet", "Supplied fingerprint does not match current metadata fingerprint.")
		return
	}
	items := req.GetItems()
	op := s.startOp(project, "zones/"+zone, "setMetadata", "zones/"+zone+"/instances/"+name, func() *computepb.Error {
		in.Metadata.Items = items
		in.Metadata.Fingerprint = proto.String(metadataFingerprint(items))
		return nil
	})
	writeProto(w, op)
}

// getGuestAttributes answers a query of the guest attributes, within the documented rate (guestQueryAllowed;
// beyond it the fake answers 429 rateLimitExceeded where Compute Engine documents only that writes may be
// lost, so that a backend polling too fast fails a test instead of losing a report some day). With guest
// attributes off nothing can have been written, and the answer is the one for an empty path.
func (s *Server) getGuestAttributes(w http.ResponseWriter, r *http.Request, project, zone, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.lookup(w, project, zone, name)
	if !ok {
		return
	}
	k := key(project, zone, name)
	if !s.guestQueryAllowed(k) {
		w.Header().Set("Retry-After", "6")
		writeError(w, http.StatusTooManyRequests, "rateLimitExceeded",
			fmt.Sprintf("Guest attributes of instance '%s' were queried more than %d times a minute or %d times a second.", name, GuestQueriesPerMinute, GuestQueriesPerSecond))
		return
	}
	if e := s.guestAttributesViolation(project); e != nil {
		writeError(w, e.status, e.reason, e.message)
		return
	}
	attrs := s.guest[k]
	if !s.guestAttributesEnabled(project, in) {
		attrs = nil
	}
	q := r.URL.Query()
	if vk := q.Get("variableKey"); vk != "" {
		v, ok := attrs[vk]
		if !ok {
			e := guestNotFound(vk)
			writeError(w, e.status, e.reason, e.message)
			return
		}
		writeProto(w, &computepb.GuestAttributes{Kind: proto.String("compute#guestAttributes"), VariableKey: proto.String(vk), VariableValue: proto.String(v)})
		return
	}
	qp := q.Get("queryPath")
	out := &computepb.GuestAttributes{Kind: proto.String("compute#guestAttributes"), QueryPath: proto.String(qp), QueryValue: &computepb.GuestAttributesValue{}}
	var paths []string
	for p := range attrs {
		if strings.HasPrefix(p, qp) {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		e := guestNotFound(qp)
		writeError(w, e.status, e.reason, e.message)
		return
	}
	sort.Strings(paths)
	for _, p := range paths {
		ns, k, _ := strings.Cut(p, "/")
		out.QueryValue.Items = append(out.QueryValue.Items, &computepb.GuestAttributesEntry{Namespace: proto.String(ns), Key: proto.String(k), Value: proto.String(attrs[p])})
	}
	writeProto(w, out)
}

// pageOf slices items by maxResults and pageToken (an offset), as list calls page.
func pageOf(w http.ResponseWriter, r *http.Request, n int) (from, to int, next string, ok bool) {
	q := r.URL.Query()
	limit := 500
	if v := q.Get("maxResults"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil || m < 0 || m > 500 {
			writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'maxResults': '"+v+"'. Must be between 0 and 500.")
			return 0, 0, "", false
		}
		if m > 0 {
			limit = m
		}
	}
	if v := q.Get("pageToken"); v != "" {
		f, err := strconv.Atoi(v)
		if err != nil || f < 0 || f > n {
			writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'pageToken': '"+v+"'.")
			return 0, 0, "", false
		}
		from = f
	}
	to = min(from+limit, n)
	if to < n {
		next = strconv.Itoa(to)
	}
	return from, to, next, true
}

func (s *Server) listInstances(w http.ResponseWriter, r *http.Request, project, zone string) {
	f, err := parseFilter(r.URL.Query().Get("filter"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'filter': "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if !s.knownZone(w, project, zone) {
		return
	}
	var all []*computepb.Instance
	for k, in := range s.instances {
		if strings.HasPrefix(k, project+"/"+zone+"/") && f.match(in) {
			all = append(all, in)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].GetName() < all[j].GetName() })
	from, to, next, ok := pageOf(w, r, len(all))
	if !ok {
		return
	}
	out := &computepb.InstanceList{Kind: proto.String("compute#instanceList"), Items: all[from:to]}
	if next != "" {
		out.NextPageToken = proto.String(next)
	}
	writeProto(w, out)
}

// aggregatedInstances answers with every zone of the project: the matching instances where there are some,
// a NO_RESULTS_ON_PAGE warning where there are none, and the broken zones' warning.
func (s *Server) aggregatedInstances(w http.ResponseWriter, r *http.Request, project string) {
	f, err := parseFilter(r.URL.Query().Get("filter"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'filter': "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	var all []*computepb.Instance
	for k, in := range s.instances {
		zone := strings.Split(k, "/")[1]
		if strings.HasPrefix(k, project+"/") && s.brokenZ[zone] == "" && f.match(in) {
			all = append(all, in)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].GetSelfLink() < all[j].GetSelfLink() })
	from, to, next, ok := pageOf(w, r, len(all))
	if !ok {
		return
	}
	out := &computepb.InstanceAggregatedList{Kind: proto.String("compute#instanceAggregatedList"), Items: map[string]*computepb.InstancesScopedList{}}
	for z := range s.zones {
		scope := &computepb.InstancesScopedList{}
		if code := s.brokenZ[z]; code != "" {
			scope.Warning = &computepb.Warning{Code: proto.String(code), Message: proto.String("The zone 'projects/" + project + "/zones/" + z + "' is unreachable."),
				Data: []*computepb.Data{{Key: proto.String("scope"), Value: proto.String("zones/" + z)}}}
		}
		out.Items["zones/"+z] = scope
	}
	for _, in := range all[from:to] {
		z := in.GetZone()[strings.LastIndexByte(in.GetZone(), '/')+1:]
		out.Items["zones/"+z].Instances = append(out.Items["zones/"+z].Instances, in)
	}
	for z, scope := range out.Items {
		if len(scope.Instances) == 0 && scope.Warning == nil {
			scope.Warning = &computepb.Warning{Code: proto.String("NO_RESULTS_ON_PAGE"), Message: proto.String("There are no results for scope '" + z + "' on this page."),
				Data: []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(z)}}}
		}
	}
	if next != "" {
		out.NextPageToken = proto.String(next)
	}
	writeProto(w, out)
}
