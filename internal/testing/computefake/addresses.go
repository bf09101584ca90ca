package computefake

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

func (s *Server) knownRegion(w http.ResponseWriter, project, region string) bool {
	for _, r := range s.zones {
		if r == region {
			return true
		}
	}
	s.notFound(w, "projects/"+project+"/regions/"+region)
	return false
}

func (s *Server) insertAddress(w http.ResponseWriter, r *http.Request, project, region string) {
	a := &computepb.Address{}
	if !readBody(w, r, a) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if !s.knownRegion(w, project, region) {
		return
	}
	name := a.GetName()
	if !nameRE.MatchString(name) {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.name': '%s'.", name))
		return
	}
	if e := checkLabels(a.GetLabels(), "resource.labels"); e != nil {
		writeError(w, e.status, e.reason, e.message)
		return
	}
	k := key(project, region, name)
	if _, ok := s.addresses[k]; ok {
		writeError(w, http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/regions/%s/addresses/%s' already exists", project, region, name))
		return
	}
	var quotaErr *computepb.Error
	if limit, ok := s.quotas[region]["STATIC_ADDRESSES"]; ok && s.usage(project, region, nil)["STATIC_ADDRESSES"]+1 > limit {
		quotaErr = opError("QUOTA_EXCEEDED", fmt.Sprintf("Quota 'STATIC_ADDRESSES' exceeded.  Limit: %.1f in region %s.", limit, region))
	}
	s.seq++
	a.Id = proto.Uint64(2_000_000 + s.seq)
	a.Kind = proto.String("compute#address")
	a.Region = proto.String(s.link(project, "regions/"+region))
	a.SelfLink = proto.String(s.link(project, "regions/"+region+"/addresses/"+name))
	a.CreationTimestamp = proto.String(s.now().Format("2006-01-02T15:04:05.000-07:00"))
	a.Address = proto.String(fmt.Sprintf("34.120.0.%d", s.seq%250+1))
	a.Status = proto.String("RESERVING")
	if a.AddressType == nil {
		a.AddressType = proto.String("EXTERNAL")
	}
	if quotaErr == nil {
		s.addresses[k] = a
	}
	op := s.startOp(project, "regions/"+region, "insert", "regions/"+region+"/addresses/"+name, func() *computepb.Error {
		if quotaErr != nil {
			return quotaErr
		}
		if cur, ok := s.addresses[k]; ok && cur == a {
			a.Status = proto.String("RESERVED")
		}
		return nil
	})
	writeProto(w, op)
}

func (s *Server) getAddress(w http.ResponseWriter, project, region, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	a, ok := s.addresses[key(project, region, name)]
	if !ok {
		s.notFound(w, "projects/"+project+"/regions/"+region+"/addresses/"+name)
		return
	}
	writeProto(w, a)
}

func (s *Server) deleteAddress(w http.ResponseWriter, project, region, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	k := key(project, region, name)
	a, ok := s.addresses[k]
	if !ok {
		s.notFound(w, "projects/"+project+"/regions/"+region+"/addresses/"+name)
		return
	}
	if len(a.Users) > 0 {
		writeError(w, http.StatusBadRequest, "resourceInUseByAnotherResource",
			fmt.Sprintf("The address resource 'projects/%s/regions/%s/addresses/%s' is already being used by '%s'", project, region, name, a.Users[0]))
		return
	}
	op := s.startOp(project, "regions/"+region, "delete", "regions/"+region+"/addresses/"+name, func() *computepb.Error {
		if cur, ok := s.addresses[k]; ok && cur == a {
			delete(s.addresses, k)
		}
		return nil
	})
	writeProto(w, op)
}

func (s *Server) getZone(w http.ResponseWriter, project, zone string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	region, ok := s.zones[zone]
	if !ok {
		s.notFound(w, "projects/"+project+"/zones/"+zone)
		return
	}
	status := "UP"
	if s.brokenZ[zone] != "" {
		status = "DOWN"
	}
	writeProto(w, &computepb.Zone{
		Kind: proto.String("compute#zone"), Name: proto.String(zone), Status: proto.String(status),
		Region: proto.String(s.link(project, "regions/"+region)), SelfLink: proto.String(s.link(project, "zones/"+zone)),
	})
}

// getRegion reports the region with its quotas: the configured limits (CPUS 24, INSTANCES 100,
// STATIC_ADDRESSES 8 unless set) and what the project uses there now.
func (s *Server) getRegion(w http.ResponseWriter, project, region string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if !s.knownRegion(w, project, region) {
		return
	}
	limits := map[string]float64{"CPUS": 24, "INSTANCES": 100, "STATIC_ADDRESSES": 8}
	for m, l := range s.quotas[region] {
		limits[m] = l
	}
	usage := s.usage(project, region, nil)
	out := &computepb.Region{Kind: proto.String("compute#region"), Name: proto.String(region), Status: proto.String("UP"),
		SelfLink: proto.String(s.link(project, "regions/"+region))}
	var metrics []string
	for m := range limits {
		metrics = append(metrics, m)
	}
	sort.Strings(metrics)
	for _, m := range metrics {
		out.Quotas = append(out.Quotas, &computepb.Quota{Metric: proto.String(m), Limit: proto.Float64(limits[m]), Usage: proto.Float64(usage[m])})
	}
	for z, r := range s.zones {
		if r == region {
			out.Zones = append(out.Zones, s.link(project, "zones/"+z))
		}
	}
	sort.Strings(out.Zones)
	_ = strings.TrimSpace
	writeProto(w, out)
}

// ReserveAddress reserves a regional external address at once, as a user would beforehand, and returns its IP.
func (s *Server) ReserveAddress(project, region, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	ip := fmt.Sprintf("34.120.1.%d", s.seq%250+1) // an address of the kind Compute Engine reserves
	s.addresses[key(project, region, name)] = &computepb.Address{
		Name: proto.String(name), Id: proto.Uint64(2_000_000 + s.seq), Kind: proto.String("compute#address"),
		Address: proto.String(ip), AddressType: proto.String("EXTERNAL"), Status: proto.String("RESERVED"),
		Region: proto.String(s.link(project, "regions/"+region)), SelfLink: proto.String(s.link(project, "regions/"+region+"/addresses/"+name)),
		CreationTimestamp: proto.String(s.now().Format("2006-01-02T15:04:05.000-07:00")),
	}
	return ip
}

// aggregatedAddresses lists the project's addresses matching the filter, by region, paged as the API pages.
func (s *Server) aggregatedAddresses(w http.ResponseWriter, r *http.Request, project string) {
	f, err := parseFilter(r.URL.Query().Get("filter"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'filter': "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	var all []*computepb.Address
	for k, a := range s.addresses {
		if strings.HasPrefix(k, project+"/") && f.match(a) {
			all = append(all, a)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].GetSelfLink() < all[j].GetSelfLink() })
	from, to, next, ok := pageOf(w, r, len(all))
	if !ok {
		return
	}
	out := &computepb.AddressAggregatedList{Kind: proto.String("compute#addressAggregatedList"), Items: map[string]*computepb.AddressesScopedList{}}
	for _, region := range s.zones {
		out.Items["regions/"+region] = &computepb.AddressesScopedList{}
	}
	for _, a := range all[from:to] {
		region := "regions/" + a.GetRegion()[strings.LastIndexByte(a.GetRegion(), '/')+1:]
		out.Items[region].Addresses = append(out.Items[region].Addresses, a)
	}
	for region, scope := range out.Items {
		if len(scope.Addresses) == 0 {
			scope.Warning = &computepb.Warning{Code: proto.String("NO_RESULTS_ON_PAGE"), Message: proto.String("There are no results for scope '" + region + "' on this page."),
				Data: []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(region)}}}
		}
	}
	if next != "" {
		out.NextPageToken = proto.String(next)
	}
	writeProto(w, out)
}
