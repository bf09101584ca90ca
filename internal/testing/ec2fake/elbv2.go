package ec2fake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Elastic Load Balancing v2's Query API ("Elastic Load Balancing API Reference version 2015-12-01"): a form
// POST with Version 2015-12-01, signed for the service elasticloadbalancing in the caller's region, answered
// with <ActionResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/"><ActionResult>...
// </ActionResult><ResponseMetadata/></ActionResponse>, lists as <member> elements, errors as an ErrorResponse
// in the same namespace (R69 to R76). Only what the aws backend makes for a proxy of several instances is
// served: internal Network Load Balancers, TCP target groups of instances and TCP listeners that forward to
// one of them.

const (
	elbVersion   = "2015-12-01"
	elbNamespace = "http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/"
	// maxELBTags is the tags a load balancer, target group or listener holds ("Quotas for your Network Load
	// Balancers": tags per load balancer / target group, 50).
	maxELBTags = 50
)

type elbHandler func(s *Server, rg *region, c *call) (any, *apiError)

// elbActions are the ELBv2 actions the fake serves; any other is InvalidAction.
var elbActions = map[string]elbHandler{
	"CreateLoadBalancer":    (*Server).elbCreateLoadBalancer,
	"DescribeLoadBalancers": (*Server).elbDescribeLoadBalancers,
	"DeleteLoadBalancer":    (*Server).elbDeleteLoadBalancer,
	"CreateTargetGroup":     (*Server).elbCreateTargetGroup,
	"DescribeTargetGroups":  (*Server).elbDescribeTargetGroups,
	"DeleteTargetGroup":     (*Server).elbDeleteTargetGroup,
	"RegisterTargets":       (*Server).elbRegisterTargets,
	"DeregisterTargets":     (*Server).elbDeregisterTargets,
	"DescribeTargetHealth":  (*Server).elbDescribeTargetHealth,
	"CreateListener":        (*Server).elbCreateListener,
	"DescribeListeners":     (*Server).elbDescribeListeners,
	"DeleteListener":        (*Server).elbDeleteListener,
	"AddTags":               (*Server).elbAddTags,
	"RemoveTags":            (*Server).elbRemoveTags,
	"DescribeTags":          (*Server).elbDescribeTags,
}

// elbParams are, for each served action, the top-level parameters the SDK's serializer can send (its request
// snapshot, request_snapshot/<Action>.request.snap in the module; TestELBWireMatchesSDK holds the two
// together). elbNotModelled are those among them the fake does not model, where ignoring one would change the
// answer: 501 NotImplemented (R69).
var (
	elbParams = map[string][]string{
		"CreateLoadBalancer":    {"CustomerOwnedIpv4Pool", "EnablePrefixForIpv6SourceNat", "IpAddressType", "IpamPools", "Name", "Scheme", "SecurityGroups", "SubnetMappings", "Subnets", "Tags", "Type"},
		"DescribeLoadBalancers": {"LoadBalancerArns", "Marker", "Names", "PageSize"},
		"DeleteLoadBalancer":    {"LoadBalancerArn"},
		"CreateTargetGroup":     {"HealthCheckEnabled", "HealthCheckIntervalSeconds", "HealthCheckPath", "HealthCheckPort", "HealthCheckProtocol", "HealthCheckTimeoutSeconds", "HealthyThresholdCount", "IpAddressType", "Matcher", "Name", "Port", "Protocol", "ProtocolVersion", "Tags", "TargetControlPort", "TargetType", "UnhealthyThresholdCount", "VpcId"},
		"DescribeTargetGroups":  {"LoadBalancerArn", "Marker", "Names", "PageSize", "TargetGroupArns"},
		"DeleteTargetGroup":     {"TargetGroupArn"},
		"RegisterTargets":       {"TargetGroupArn", "Targets"},
		"DeregisterTargets":     {"TargetGroupArn", "Targets"},
		"DescribeTargetHealth":  {"Include", "TargetGroupArn", "Targets"},
		"CreateListener":        {"AlpnPolicy", "Certificates", "DefaultActions", "LoadBalancerArn", "MutualAuthentication", "Port", "Protocol", "SslPolicy", "Tags"},
		"DescribeListeners":     {"ListenerArns", "LoadBalancerArn", "Marker", "PageSize"},
		"DeleteListener":        {"ListenerArn"},
		"AddTags":               {"ResourceArns", "Tags"},
		"RemoveTags":            {"ResourceArns", "TagKeys"},
		"DescribeTags":          {"ResourceArns"},
	}
	elbNotModelled = map[string][]string{
		"CreateLoadBalancer":   {"CustomerOwnedIpv4Pool", "EnablePrefixForIpv6SourceNat", "IpamPools", "SecurityGroups", "SubnetMappings"},
		"CreateTargetGroup":    {"ProtocolVersion", "TargetControlPort"},
		"CreateListener":       {"AlpnPolicy", "Certificates", "MutualAuthentication", "SslPolicy"},
		"DescribeTargetHealth": {"Include"},
	}
)

// elbState is one region's load balancers, target groups and listeners, by ARN.
type elbState struct {
	// drainsCut counts instances terminated while a target group still drained their connections: what a
	// client of the load balancer sees as connections reset.
	drainsCut int

	lbs       map[string]*loadBalancer
	tgs       map[string]*targetGroup
	listeners map[string]*listener
}

type loadBalancer struct {
	made
	arn, dnsName, vpcID, scheme string
	created                     time.Time
	zones                       []lbZone
	tags                        map[string]string
}

// made is what a create of a named object keeps: its name and request, the create's settings in a stable
// form, so that a create of the same name and settings answers the same object (R70, R71).
type made struct{ name, request string }

func (m made) madeBy() made { return m }

// byName finds the object of the name in objs, its value's zero when none has it. Names are unique within
// a kind: a create of a taken name answers the object or is refused.
func byName[T interface{ madeBy() made }](objs map[string]T, name string) (T, bool) {
	for _, v := range objs {
		if v.madeBy().name == name {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// sortedNames are the objects' names, sorted (nil when there are none).
func sortedNames[T interface{ madeBy() made }](objs map[string]T) []string {
	var out []string
	for _, v := range objs {
		out = append(out, v.madeBy().name)
	}
	slices.Sort(out)
	return out
}

type lbZone struct{ subnetID, zone, privateIP string }

type targetGroup struct {
	made
	arn, protocol, vpcID, targetType string
	port                             int
	hc                               healthCheck
	tags                             map[string]string
	targets                          map[string]*target // by instance id
}

type healthCheck struct {
	enabled                             bool
	protocol, port, path, matcher       string
	interval, timeout, healthy, unhealt int
}

type target struct {
	id   string
	port int
	// draining counts down the DescribeTargetHealth calls a deregistered target is still listed (R72).
	draining int
}

type listener struct {
	arn, lbARN, protocol, tgARN string
	port                        int
	tags                        map[string]string
	request                     string
}

func (rg *region) elb() *elbState {
	if rg.elbState == nil {
		rg.elbState = &elbState{lbs: map[string]*loadBalancer{}, tgs: map[string]*targetGroup{}, listeners: map[string]*listener{}}
	}
	return rg.elbState
}

// elbErr is ELBv2's error: its code and HTTP status ("Elastic Load Balancing API Reference": each action's
// Errors, all 400 but for these, and Common Errors).
func elbErr(code, format string, args ...any) *apiError {
	status := http.StatusBadRequest
	switch code {
	case "AccessDenied", "InvalidClientTokenId", "SignatureDoesNotMatch", "MissingAuthenticationToken", "ExpiredToken":
		status = http.StatusForbidden
	case "InternalFailure":
		status = http.StatusInternalServerError
	case "NotImplemented":
		status = http.StatusNotImplemented
	case "ServiceUnavailable":
		status = http.StatusServiceUnavailable
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// checkELBAction refuses an action ELBv2 has not or the fake does not serve, a parameter its SDK serializer
// cannot send or one the fake does not model, and a request its caller's policies do not allow (R69, R76).
// The caller holds s.mu.
func (s *Server) checkELBAction(c *call) *apiError {
	if _, ok := elbActions[c.action]; !ok {
		return elbErr("InvalidAction", "Could not find operation %s for version %s", c.action, elbVersion)
	}
	for name := range c.form.v {
		top, _, _ := strings.Cut(name, ".")
		if top == "Action" || top == "Version" {
			continue
		}
		if !slices.Contains(elbParams[c.action], top) {
			return elbErr("ValidationError", "1 validation error detected: Unknown parameter %s", top)
		}
		if slices.Contains(elbNotModelled[c.action], top) {
			return notModelledELB("parameter " + top + " of " + c.action)
		}
	}
	return s.authorizeRequests(c, s.elbAuthorizations(s.regions[c.region], c))
}

func notModelledELB(what string) *apiError {
	return elbErr("NotImplemented", "ec2fake does not model %s", what)
}

// elbNameRE is a load balancer's or target group's name ("CreateLoadBalancer", Name: "can have a maximum of
// 32 characters, must contain only alphanumeric characters or hyphens, must not begin or end with a hyphen,
// and must not begin with "internal-""; "CreateTargetGroup", Name: the same but the prefix rule).
var elbNameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?$`)

func checkELBName(name, what string) *apiError {
	if !elbNameRE.MatchString(name) || what == "load balancer" && strings.HasPrefix(name, "internal-") {
		return elbErr("ValidationError", "The %s name '%s' is not valid: at most 32 alphanumeric characters or hyphens, not beginning or ending with a hyphen", what, name)
	}
	return nil
}

// elbTags reads Tags.member.N.Key/Value ("Tag": keys 1 to 128 characters, values up to 256; "AddTags": "Each
// tag key must be unique"; tag keys beginning aws: are reserved): DuplicateTagKeys, ValidationError.
func elbTags(f form) (map[string]string, *apiError) {
	tags := map[string]string{}
	for _, n := range f.indexes("Tags.member") {
		k, val := f.str(fmt.Sprintf("Tags.member.%d.Key", n)), f.str(fmt.Sprintf("Tags.member.%d.Value", n))
		if _, dup := tags[k]; dup {
			return nil, elbErr("DuplicateTagKeys", "Tag key '%s' is duplicated", k)
		}
		if len(k) < 1 || len(k) > 128 || len(val) > 256 || strings.HasPrefix(strings.ToLower(k), "aws:") {
			return nil, elbErr("ValidationError", "Tag key '%s' is not valid: 1 to 128 characters, not beginning with 'aws:', its value at most 256", k)
		}
		tags[k] = val
	}
	if len(tags) > maxELBTags {
		return nil, elbErr("TooManyTags", "You've reached the limit on the number of tags for this resource")
	}
	return tags, nil
}

// elbARN is an ELBv2 resource's ARN: arn:aws:elasticloadbalancing:<region>:<account>:<resource> ("Elastic
// Load Balancing": the resource types loadbalancer/net/<name>/<id>, targetgroup/<name>/<id>,
// listener/net/<lb name>/<lb id>/<id>).
func (s *Server) elbARN(rg *region, resource string) string {
	return "arn:aws:elasticloadbalancing:" + rg.name + ":" + s.opts.AccountID + ":" + resource
}

// elbID is the 16 hex digits ELBv2 gives a resource.
func (s *Server) elbID() string {
	s.seq++
	sum := sha256.Sum256(fmt.Appendf(nil, "elb/%d", s.seq))
	return hex.EncodeToString(sum[:8])
}

// elbCreateLoadBalancer: an internal Network Load Balancer in one subnet of each Availability Zone given,
// with a private address in each (R70).
func (s *Server) elbCreateLoadBalancer(rg *region, c *call) (any, *apiError) {
	f := c.form
	name := f.str("Name")
	if e := checkELBName(name, "load balancer"); e != nil {
		return nil, e
	}
	if t := f.str("Type"); t != "network" {
		return nil, notModelledELB("load balancers of type " + strconv.Quote(t) + " (only network)")
	}
	if sc := f.str("Scheme"); sc != "internal" {
		return nil, notModelledELB("the scheme " + strconv.Quote(sc) + " (only internal)")
	}
	if ip := f.str("IpAddressType"); ip != "" && ip != "ipv4" {
		return nil, notModelledELB("IpAddressType " + ip)
	}
	subnets := f.list("Subnets.member")
	if len(subnets) == 0 {
		return nil, elbErr("ValidationError", "At least one subnet must be specified")
	}
	var zones []lbZone
	vpc := ""
	for _, id := range subnets {
		sn := rg.subnets[id]
		if sn == nil {
			return nil, elbErr("SubnetNotFound", "The specified subnet does not exist: '%s'", id)
		}
		if vpc != "" && sn.VPCID != vpc {
			return nil, elbErr("InvalidConfigurationRequest", "All subnets must belong to the same VPC: '%s' is in %s, not %s", id, sn.VPCID, vpc)
		}
		vpc = sn.VPCID
		for _, z := range zones {
			if z.zone == sn.AvailabilityZone {
				return nil, elbErr("InvalidConfigurationRequest", "A load balancer cannot be attached to multiple subnets in the same Availability Zone: '%s' and '%s' are both in %s", z.subnetID, id, sn.AvailabilityZone)
			}
		}
		zones = append(zones, lbZone{subnetID: id, zone: sn.AvailabilityZone})
	}
	tags, e := elbTags(f)
	if e != nil {
		return nil, e
	}
	request := f.canonical("Action", "Version")
	if lb, ok := byName(rg.elb().lbs, name); ok {
		if lb.request == request {
			return &elbLoadBalancersResult{LoadBalancers: []lbXML{s.lbXML(lb)}}, nil // idempotent (R70)
		}
		return nil, elbErr("DuplicateLoadBalancerName", "A load balancer with the same name '%s' exists, but with different settings", name)
	}
	for i := range zones {
		zones[i].privateIP = rg.privateIP(rg.subnets[zones[i].subnetID])
	}
	id := s.elbID()
	lb := &loadBalancer{
		arn: s.elbARN(rg, "loadbalancer/net/"+name+"/"+id), vpcID: vpc, scheme: "internal", created: s.now(),
		zones: zones, tags: tags, made: made{name: name, request: request},
		dnsName: name + "-" + id + ".elb." + rg.name + ".amazonaws.com",
	}
	rg.elb().lbs[lb.arn] = lb
	return &elbLoadBalancersResult{LoadBalancers: []lbXML{s.lbXML(lb)}}, nil
}

// elbDescribeLoadBalancers lists the region's load balancers, or those named by ARN or name: one that does not
// exist is LoadBalancerNotFound (R73).
func (s *Server) elbDescribeLoadBalancers(rg *region, c *call) (any, *apiError) {
	f := c.form
	arns, names := f.list("LoadBalancerArns.member"), f.list("Names.member")
	if len(arns) > 0 && len(names) > 0 {
		return nil, elbErr("ValidationError", "Load balancer names and load balancer ARNs cannot be specified at the same time")
	}
	var out []*loadBalancer
	switch {
	case len(arns) > 0:
		var e *apiError
		if out, e = byARNs(rg.elb().lbs, arns, "LoadBalancerNotFound", "load balancers"); e != nil {
			return nil, e
		}
	case len(names) > 0:
		for _, n := range names {
			lb, ok := byName(rg.elb().lbs, n)
			if !ok {
				return nil, elbErr("LoadBalancerNotFound", "Load balancers '[%s]' not found", n)
			}
			out = append(out, lb)
		}
	default:
		for _, a := range sortedKeys(rg.elb().lbs) {
			out = append(out, rg.elb().lbs[a])
		}
	}
	page, next, e := elbPage(f, out)
	if e != nil {
		return nil, e
	}
	res := &elbLoadBalancersResult{NextMarker: next}
	for _, lb := range page {
		res.LoadBalancers = append(res.LoadBalancers, s.lbXML(lb))
	}
	return res, nil
}

// byARNs are the objects of the ARNs, in their order: a Describe by ARNs answers code, "One or more <what>
// not found", when one of them does not exist.
func byARNs[T any](objs map[string]*T, arns []string, code, what string) ([]*T, *apiError) {
	var out []*T
	for _, a := range arns {
		v := objs[a]
		if v == nil {
			return nil, elbErr(code, "One or more %s not found", what)
		}
		out = append(out, v)
	}
	return out, nil
}

// elbPage pages a list by Marker (the index to go on from, the fake's own form) and PageSize (1 to 400,
// "DescribeLoadBalancers", PageSize).
func elbPage[T any](f form, all []T) ([]T, string, *apiError) {
	size := 400
	if f.has("PageSize") {
		n, err := strconv.Atoi(f.str("PageSize"))
		if err != nil || n < 1 || n > 400 {
			return nil, "", elbErr("ValidationError", "1 validation error detected: Value '%s' at 'pageSize' failed to satisfy constraint: Member must have value between 1 and 400", f.str("PageSize"))
		}
		size = n
	}
	start := 0
	if m := f.str("Marker"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 0 || n > len(all) {
			return nil, "", elbErr("ValidationError", "Invalid marker '%s'", m)
		}
		start = n
	}
	end := min(start+size, len(all))
	next := ""
	if end < len(all) {
		next = strconv.Itoa(end)
	}
	return all[start:end], next, nil
}

// elbDeleteLoadBalancer deletes a load balancer and its listeners; one that does not exist is success (R75).
func (s *Server) elbDeleteLoadBalancer(rg *region, c *call) (any, *apiError) {
	arn := c.form.str("LoadBalancerArn")
	st := rg.elb()
	if st.lbs[arn] == nil {
		return &struct{}{}, nil
	}
	for la, l := range st.listeners {
		if l.lbARN == arn {
			delete(st.listeners, la)
		}
	}
	delete(st.lbs, arn)
	return &struct{}{}, nil
}

// elbCreateTargetGroup: a TCP target group of instances in a VPC, with its health check (R71).
func (s *Server) elbCreateTargetGroup(rg *region, c *call) (any, *apiError) {
	f := c.form
	name := f.str("Name")
	if e := checkELBName(name, "target group"); e != nil {
		return nil, e
	}
	if tt := f.str("TargetType"); tt != "" && tt != "instance" {
		return nil, notModelledELB("targets of type " + tt + " (only instance)")
	}
	if p := f.str("Protocol"); p != "TCP" {
		return nil, notModelledELB("target groups of protocol " + strconv.Quote(p) + " (only TCP)")
	}
	if ip := f.str("IpAddressType"); ip != "" && ip != "ipv4" {
		return nil, notModelledELB("IpAddressType " + ip)
	}
	port, e := elbPort(f, "Port", true)
	if e != nil {
		return nil, e
	}
	vpc := f.str("VpcId")
	if vpc == "" {
		return nil, elbErr("ValidationError", "A VPC ID must be specified for a target group of instances")
	}
	if rg.vpcs[vpc] == nil {
		return nil, elbErr("ValidationError", "The VPC ID '%s' is not found", vpc)
	}
	hc, e := readHealthCheck(f)
	if e != nil {
		return nil, e
	}
	tags, e := elbTags(f)
	if e != nil {
		return nil, e
	}
	request := f.canonical("Action", "Version")
	if tg, ok := byName(rg.elb().tgs, name); ok {
		if tg.request == request {
			return &elbTargetGroupsResult{TargetGroups: []tgXML{s.tgXML(rg, tg)}}, nil // idempotent (R71)
		}
		return nil, elbErr("DuplicateTargetGroupName", "A target group with the same name '%s' exists, but with different settings", name)
	}
	tg := &targetGroup{
		arn: s.elbARN(rg, "targetgroup/"+name+"/"+s.elbID()), protocol: "TCP", vpcID: vpc, targetType: "instance",
		port: port, hc: hc, tags: tags, targets: map[string]*target{}, made: made{name: name, request: request},
	}
	rg.elb().tgs[tg.arn] = tg
	return &elbTargetGroupsResult{TargetGroups: []tgXML{s.tgXML(rg, tg)}}, nil
}

// elbPort reads a port, 1 to 65535.
func elbPort(f form, k string, required bool) (int, *apiError) {
	if !f.has(k) {
		if required {
			return 0, elbErr("ValidationError", "A port must be specified")
		}
		return 0, nil
	}
	n, err := strconv.Atoi(f.str(k))
	if err != nil || n < 1 || n > 65535 {
		return 0, elbErr("ValidationError", "1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: Member must have value between 1 and 65535", f.str(k), lowerFirst(k))
	}
	return n, nil
}

// readHealthCheck reads a target group's health check ("CreateTargetGroup": HealthCheckProtocol TCP, HTTP or
// HTTPS for a TCP group, default TCP; HealthCheckPort "traffic-port" (the default) or 1 to 65535;
// HealthCheckPath only with HTTP(S), default "/"; HealthCheckIntervalSeconds 5 to 300, default 30;
// HealthCheckTimeoutSeconds 2 to 120, default 10 for TCP and 6 for HTTP; HealthyThresholdCount and
// UnhealthyThresholdCount 2 to 10, default 5 and 2; Matcher HttpCode for HTTP(S), default 200-399).
func readHealthCheck(f form) (healthCheck, *apiError) {
	hc := healthCheck{enabled: true, protocol: "TCP", port: "traffic-port", interval: 30, timeout: 10, healthy: 5, unhealt: 2}
	if b := f.str("HealthCheckEnabled"); b == "false" {
		return hc, notModelledELB("a target group without health checks")
	}
	if p := f.str("HealthCheckProtocol"); p != "" {
		switch p {
		case "TCP", "HTTP":
			hc.protocol = p
		case "HTTPS":
			return hc, notModelledELB("HTTPS health checks")
		default:
			return hc, elbErr("ValidationError", "Health check protocol '%s' is not supported for target groups of protocol TCP", p)
		}
	}
	if hc.protocol == "HTTP" {
		hc.path, hc.matcher, hc.timeout = "/", "200-399", 6
		if p := f.str("HealthCheckPath"); p != "" {
			if !strings.HasPrefix(p, "/") || len(p) > 1024 {
				return hc, elbErr("ValidationError", "Health check path '%s' must begin with '/' and be at most 1024 characters", p)
			}
			hc.path = p
		}
		if m := f.str("Matcher.HttpCode"); m != "" {
			hc.matcher = m
		}
		if f.has("Matcher.GrpcCode") {
			return hc, notModelledELB("gRPC matchers")
		}
	} else if f.has("HealthCheckPath") || f.anyUnder("Matcher") {
		return hc, elbErr("ValidationError", "Health check path and matcher are not supported for health checks of protocol TCP")
	}
	if p := f.str("HealthCheckPort"); p != "" && p != "traffic-port" {
		if _, e := elbPort(f, "HealthCheckPort", false); e != nil {
			return hc, e
		}
		hc.port = p
	}
	for _, b := range []struct {
		k        string
		dst      *int
		min, max int
	}{
		{"HealthCheckIntervalSeconds", &hc.interval, 5, 300},
		{"HealthCheckTimeoutSeconds", &hc.timeout, 2, 120},
		{"HealthyThresholdCount", &hc.healthy, 2, 10},
		{"UnhealthyThresholdCount", &hc.unhealt, 2, 10},
	} {
		if !f.has(b.k) {
			continue
		}
		n, err := strconv.Atoi(f.str(b.k))
		if err != nil || n < b.min || n > b.max {
			return hc, elbErr("ValidationError", "1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: Member must have value between %d and %d", f.str(b.k), lowerFirst(b.k), b.min, b.max)
		}
		*b.dst = n
	}
	return hc, nil
}

// elbDescribeTargetGroups lists target groups: all, a load balancer's, or those named (R73).
func (s *Server) elbDescribeTargetGroups(rg *region, c *call) (any, *apiError) {
	f := c.form
	lbARN, arns, names := f.str("LoadBalancerArn"), f.list("TargetGroupArns.member"), f.list("Names.member")
	given := 0
	for _, b := range []bool{lbARN != "", len(arns) > 0, len(names) > 0} {
		if b {
			given++
		}
	}
	if given > 1 {
		return nil, elbErr("ValidationError", "Only one of LoadBalancerArn, TargetGroupArns and Names can be specified")
	}
	st := rg.elb()
	var out []*targetGroup
	switch {
	case lbARN != "":
		if st.lbs[lbARN] == nil {
			return nil, elbErr("LoadBalancerNotFound", "Load balancer '%s' not found", lbARN)
		}
		for _, a := range sortedKeys(st.tgs) {
			if slices.Contains(st.lbsOf(a), lbARN) {
				out = append(out, st.tgs[a])
			}
		}
	case len(arns) > 0:
		var e *apiError
		if out, e = byARNs(st.tgs, arns, "TargetGroupNotFound", "target groups"); e != nil {
			return nil, e
		}
	case len(names) > 0:
		for _, n := range names {
			tg, ok := byName(st.tgs, n)
			if !ok {
				return nil, elbErr("TargetGroupNotFound", "Target groups '[%s]' not found", n)
			}
			out = append(out, tg)
		}
	default:
		for _, a := range sortedKeys(st.tgs) {
			out = append(out, st.tgs[a])
		}
	}
	page, next, e := elbPage(f, out)
	if e != nil {
		return nil, e
	}
	res := &elbTargetGroupsResult{NextMarker: next}
	for _, tg := range page {
		res.TargetGroups = append(res.TargetGroups, s.tgXML(rg, tg))
	}
	return res, nil
}

// lbsOf are the load balancers whose listeners forward to the target group, sorted.
func (st *elbState) lbsOf(tgARN string) []string {
	var out []string
	for _, l := range st.listeners {
		if l.tgARN == tgARN && !slices.Contains(out, l.lbARN) {
			out = append(out, l.lbARN)
		}
	}
	slices.Sort(out)
	return out
}

// elbDeleteTargetGroup deletes a target group no listener forwards to (ResourceInUse otherwise); one that does
// not exist is success (R75).
func (s *Server) elbDeleteTargetGroup(rg *region, c *call) (any, *apiError) {
	arn := c.form.str("TargetGroupArn")
	st := rg.elb()
	if st.tgs[arn] == nil {
		return &struct{}{}, nil
	}
	for _, l := range st.listeners {
		if l.tgARN == arn {
			return nil, elbErr("ResourceInUse", "Target group '%s' is currently in use by a listener or a rule", arn)
		}
	}
	delete(st.tgs, arn)
	return &struct{}{}, nil
}

// targets reads Targets.member.N (Id, Port; an AvailabilityZone or QuicServerId is not modelled).
func targets(f form) ([]target, *apiError) {
	var out []target
	for _, n := range f.indexes("Targets.member") {
		p := fmt.Sprintf("Targets.member.%d.", n)
		if f.has(p+"AvailabilityZone") || f.has(p+"QuicServerId") {
			return nil, notModelledELB("a target's AvailabilityZone or QuicServerId")
		}
		port, e := elbPort(f, p+"Port", false)
		if e != nil {
			return nil, e
		}
		out = append(out, target{id: f.str(p + "Id"), port: port})
	}
	if len(out) == 0 {
		return nil, elbErr("ValidationError", "At least one target must be specified")
	}
	return out, nil
}

// elbRegisterTargets registers running instances of the group's VPC (R72).
func (s *Server) elbRegisterTargets(rg *region, c *call) (any, *apiError) {
	tg := rg.elb().tgs[c.form.str("TargetGroupArn")]
	if tg == nil {
		return nil, elbErr("TargetGroupNotFound", "Target group '%s' not found", c.form.str("TargetGroupArn"))
	}
	ts, e := targets(c.form)
	if e != nil {
		return nil, e
	}
	var notRunning []string
	for _, t := range ts {
		in := rg.instances[t.id]
		if in == nil || in.gone || in.VPCID != tg.vpcID {
			return nil, elbErr("InvalidTarget", "The following targets are not in the target group's VPC '%s': '%s'", tg.vpcID, t.id)
		}
		if in.State != StateRunning {
			notRunning = append(notRunning, t.id)
		}
	}
	if len(notRunning) > 0 {
		return nil, elbErr("InvalidTarget", "The following targets are not in a running state and can not be registered: '%s'", strings.Join(notRunning, "', '"))
	}
	for _, t := range ts {
		if t.port == 0 {
			t.port = tg.port
		}
		tg.targets[t.id] = &target{id: t.id, port: t.port}
	}
	return &struct{}{}, nil
}

// elbDeregisterTargets deregisters targets: from a group a load balancer forwards to, a target drains first
// (listed draining for Timing.DrainingPolls health reads, R72), from another it leaves at once. One of an
// instance that does not exist is InvalidTarget, one not registered nothing.
func (s *Server) elbDeregisterTargets(rg *region, c *call) (any, *apiError) {
	tg := rg.elb().tgs[c.form.str("TargetGroupArn")]
	if tg == nil {
		return nil, elbErr("TargetGroupNotFound", "Target group '%s' not found", c.form.str("TargetGroupArn"))
	}
	ts, e := targets(c.form)
	if e != nil {
		return nil, e
	}
	for _, t := range ts {
		if in := rg.instances[t.id]; in == nil || in.gone {
			if tg.targets[t.id] == nil {
				return nil, elbErr("InvalidTarget", "The target '%s' does not exist", t.id)
			}
		}
	}
	inUse := len(rg.elb().lbsOf(tg.arn)) > 0
	for _, t := range ts {
		held := tg.targets[t.id]
		switch {
		case held == nil:
		case inUse && s.timing.DrainingPolls > 0:
			if held.draining == 0 {
				held.draining = s.timing.DrainingPolls
			}
		default:
			delete(tg.targets, t.id)
		}
	}
	return &struct{}{}, nil
}

// elbDescribeTargetHealth answers each registered target's health (R74): healthy while its instance runs and
// no test marked it otherwise (SetTargetHealth), unhealthy Target.FailedHealthChecks when a test did, unused
// Target.InvalidState when its instance is not running, unused Target.NotInUse when no listener forwards to
// the group; a target asked for that is not registered is unused Target.NotRegistered.
func (s *Server) elbDescribeTargetHealth(rg *region, c *call) (any, *apiError) {
	tg := rg.elb().tgs[c.form.str("TargetGroupArn")]
	if tg == nil {
		return nil, elbErr("TargetGroupNotFound", "Target group '%s' not found", c.form.str("TargetGroupArn"))
	}
	var ids []string
	if c.form.anyUnder("Targets") {
		ts, e := targets(c.form)
		if e != nil {
			return nil, e
		}
		for _, t := range ts {
			if in := rg.instances[t.id]; in == nil || in.gone {
				return nil, elbErr("InvalidTarget", "The target '%s' does not exist", t.id)
			}
			ids = append(ids, t.id)
		}
	} else {
		ids = sortedKeys(tg.targets)
	}
	inUse := len(rg.elb().lbsOf(tg.arn)) > 0
	res := &elbTargetHealthResult{}
	for _, id := range ids {
		d := targetHealthXML{Target: targetXML{ID: id, Port: tg.port}, HealthCheckPort: tg.hcPort()}
		t := tg.targets[id]
		in := rg.instances[id]
		switch {
		case t == nil:
			d.TargetHealth = healthXML{State: "unused", Reason: "Target.NotRegistered", Description: "Target is not registered to the target group"}
		case t.draining > 0:
			d.Target.Port = t.port
			d.TargetHealth = healthXML{State: "draining", Reason: "Target.DeregistrationInProgress", Description: "Target deregistration is in progress"}
			if t.draining--; t.draining == 0 {
				delete(tg.targets, id)
			}
		case in == nil || in.gone || in.State != StateRunning:
			d.Target.Port = t.port
			d.TargetHealth = healthXML{State: "unused", Reason: "Target.InvalidState", Description: "Target is in the stopped or terminated state"}
		case !inUse:
			d.Target.Port = t.port
			d.TargetHealth = healthXML{State: "unused", Reason: "Target.NotInUse", Description: "Target group is not configured to receive traffic from the load balancer"}
		case rg.unhealthy[id] || rg.rebooting(id):
			d.Target.Port = t.port
			d.TargetHealth = healthXML{State: "unhealthy", Reason: "Target.FailedHealthChecks", Description: "Health checks failed"}
		default:
			d.Target.Port = t.port
			d.TargetHealth = healthXML{State: "healthy"}
		}
		res.TargetHealthDescriptions = append(res.TargetHealthDescriptions, d)
	}
	return res, nil
}

func (tg *targetGroup) hcPort() string {
	if tg.hc.port == "traffic-port" {
		return strconv.Itoa(tg.port)
	}
	return tg.hc.port
}

// DrainsCut is how many instances of the region were terminated while their target was still draining
// (R72): each such termination resets the connections the load balancer was letting finish.
func (s *Server) DrainsCut(region string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mustRegion(region).elb().drainsCut
}

// cutDrains counts a termination of instance id while a target group drains it (DrainsCut).
func (rg *region) cutDrains(id string) {
	for _, tg := range rg.elb().tgs {
		if t := tg.targets[id]; t != nil && t.draining > 0 {
			rg.elb().drainsCut++
		}
	}
}

// SetTargetHealth makes the instance's health checks fail (healthy false) or pass again, in every target
// group of the region it is registered in: DescribeTargetHealth then answers unhealthy
// Target.FailedHealthChecks while it runs (R74).
func (s *Server) SetTargetHealth(region, instanceID string, healthy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	if rg.unhealthy == nil {
		rg.unhealthy = map[string]bool{}
	}
	rg.unhealthy[instanceID] = !healthy
}

// elbCreateListener: a TCP listener of a network load balancer forwarding to one target group of its VPC (R73).
func (s *Server) elbCreateListener(rg *region, c *call) (any, *apiError) {
	f := c.form
	st := rg.elb()
	lb := st.lbs[f.str("LoadBalancerArn")]
	if lb == nil {
		return nil, elbErr("LoadBalancerNotFound", "Load balancer '%s' not found", f.str("LoadBalancerArn"))
	}
	if p := f.str("Protocol"); p != "TCP" {
		return nil, notModelledELB("listeners of protocol " + strconv.Quote(p) + " (only TCP)")
	}
	port, e := elbPort(f, "Port", true)
	if e != nil {
		return nil, e
	}
	actions := f.indexes("DefaultActions.member")
	if len(actions) != 1 {
		return nil, notModelledELB("a listener without exactly one default action")
	}
	p := fmt.Sprintf("DefaultActions.member.%d.", actions[0])
	if f.str(p+"Type") != "forward" {
		return nil, notModelledELB("default actions other than forward")
	}
	for name := range f.v {
		if strings.HasPrefix(name, p) && name != p+"Type" && name != p+"TargetGroupArn" && name != p+"Order" {
			return nil, notModelledELB("the default action's " + strings.TrimPrefix(name, p))
		}
	}
	tg := st.tgs[f.str(p+"TargetGroupArn")]
	if tg == nil {
		return nil, elbErr("TargetGroupNotFound", "Target group '%s' not found", f.str(p+"TargetGroupArn"))
	}
	if tg.vpcID != lb.vpcID {
		return nil, elbErr("ValidationError", "The target group '%s' is in VPC %s, not in the load balancer's VPC %s", tg.arn, tg.vpcID, lb.vpcID)
	}
	if others := st.lbsOf(tg.arn); len(others) > 0 && !slices.Contains(others, lb.arn) {
		return nil, elbErr("TargetGroupAssociationLimit", "The target group '%s' is already associated with a different load balancer", tg.arn)
	}
	tags, e := elbTags(f)
	if e != nil {
		return nil, e
	}
	request := f.canonical("Action", "Version")
	for _, l := range st.listeners {
		if l.lbARN != lb.arn || l.port != port {
			continue
		}
		if l.request == request {
			return &elbListenersResult{Listeners: []listenerXML{l.xml()}}, nil // idempotent (R73)
		}
		return nil, elbErr("DuplicateListener", "A listener already exists on port %d of load balancer '%s'", port, lb.arn)
	}
	_, rest, _ := strings.Cut(lb.arn, ":loadbalancer/")
	l := &listener{arn: s.elbARN(rg, "listener/"+rest+"/"+s.elbID()), lbARN: lb.arn, protocol: "TCP", port: port, tgARN: tg.arn, tags: tags, request: request}
	st.listeners[l.arn] = l
	return &elbListenersResult{Listeners: []listenerXML{l.xml()}}, nil
}

// elbDescribeListeners lists a load balancer's listeners, or those named by ARN: one of the two is required
// (R73).
func (s *Server) elbDescribeListeners(rg *region, c *call) (any, *apiError) {
	f := c.form
	st := rg.elb()
	lbARN, arns := f.str("LoadBalancerArn"), f.list("ListenerArns.member")
	var out []*listener
	switch {
	case lbARN != "" && len(arns) > 0:
		return nil, elbErr("ValidationError", "Listener ARNs and a load balancer ARN cannot be specified at the same time")
	case lbARN != "":
		if st.lbs[lbARN] == nil {
			return nil, elbErr("LoadBalancerNotFound", "Load balancer '%s' not found", lbARN)
		}
		for _, a := range sortedKeys(st.listeners) {
			if st.listeners[a].lbARN == lbARN {
				out = append(out, st.listeners[a])
			}
		}
	case len(arns) > 0:
		var e *apiError
		if out, e = byARNs(st.listeners, arns, "ListenerNotFound", "listeners"); e != nil {
			return nil, e
		}
	default:
		return nil, elbErr("ValidationError", "You must specify either listener ARNs or a load balancer ARN")
	}
	page, next, e := elbPage(f, out)
	if e != nil {
		return nil, e
	}
	res := &elbListenersResult{NextMarker: next}
	for _, l := range page {
		res.Listeners = append(res.Listeners, l.xml())
	}
	return res, nil
}

// elbDeleteListener deletes a listener; one that does not exist is ListenerNotFound (R75).
func (s *Server) elbDeleteListener(rg *region, c *call) (any, *apiError) {
	arn := c.form.str("ListenerArn")
	if rg.elb().listeners[arn] == nil {
		return nil, elbErr("ListenerNotFound", "Listener '%s' not found", arn)
	}
	delete(rg.elb().listeners, arn)
	return &struct{}{}, nil
}

// elbTagged is the tags of the load balancer, target group or listener an ARN names, or its NotFound (R75).
func (st *elbState) tagged(arn string) (*map[string]string, *apiError) {
	switch {
	case st.lbs[arn] != nil:
		return &st.lbs[arn].tags, nil
	case st.tgs[arn] != nil:
		return &st.tgs[arn].tags, nil
	case st.listeners[arn] != nil:
		return &st.listeners[arn].tags, nil
	case strings.Contains(arn, ":targetgroup/"):
		return nil, elbErr("TargetGroupNotFound", "Target group '%s' not found", arn)
	case strings.Contains(arn, ":listener/"):
		return nil, elbErr("ListenerNotFound", "Listener '%s' not found", arn)
	}
	return nil, elbErr("LoadBalancerNotFound", "Load balancer '%s' not found", arn)
}

// elbAddTags adds tags to each resource named, overwriting a key it has; at most 50 a resource, all or none
// (R75).
func (s *Server) elbAddTags(rg *region, c *call) (any, *apiError) {
	arns, e := resourceARNs(c.form)
	if e != nil {
		return nil, e
	}
	add, e := elbTags(c.form)
	if e != nil {
		return nil, e
	}
	if len(add) == 0 {
		return nil, elbErr("ValidationError", "At least one tag must be specified")
	}
	var dsts []*map[string]string
	for _, a := range arns {
		dst, e := rg.elb().tagged(a)
		if e != nil {
			return nil, e
		}
		merged := copyTags(*dst)
		merged = mergeTags(merged, add)
		if len(merged) > maxELBTags {
			return nil, elbErr("TooManyTags", "You've reached the limit on the number of tags for this resource")
		}
		dsts = append(dsts, dst)
	}
	for _, dst := range dsts {
		*dst = mergeTags(*dst, add)
	}
	return &struct{}{}, nil
}

// resourceARNs are the ResourceArns of AddTags and RemoveTags, a required member ("AddTags", "RemoveTags":
// ResourceArns, "This member is required"): ValidationError when there is none.
func resourceARNs(f form) ([]string, *apiError) {
	arns := f.list("ResourceArns.member")
	if len(arns) == 0 {
		return nil, elbErr("ValidationError", "1 validation error detected: Value null at 'resourceArns' failed to satisfy constraint: Member must not be null")
	}
	return arns, nil
}

// elbRemoveTags removes the keys from each resource named, a key it has not being nothing; every resource must
// exist, all or none (R75). TagKeys is required, each key 1 to 128 characters ("RemoveTags", TagKeys; "Tag",
// Key).
func (s *Server) elbRemoveTags(rg *region, c *call) (any, *apiError) {
	arns, e := resourceARNs(c.form)
	if e != nil {
		return nil, e
	}
	keys := c.form.list("TagKeys.member")
	if len(keys) == 0 {
		return nil, elbErr("ValidationError", "1 validation error detected: Value null at 'tagKeys' failed to satisfy constraint: Member must not be null")
	}
	for _, k := range keys {
		if n := utf8.RuneCountInString(k); n < 1 || n > 128 {
			return nil, elbErr("ValidationError", "1 validation error detected: Value '%s' at 'tagKeys' failed to satisfy constraint: Member must have length between 1 and 128", k)
		}
	}
	var dsts []*map[string]string
	for _, a := range arns {
		dst, e := rg.elb().tagged(a)
		if e != nil {
			return nil, e
		}
		dsts = append(dsts, dst)
	}
	for _, dst := range dsts {
		for _, k := range keys {
			delete(*dst, k)
		}
	}
	return &struct{}{}, nil
}

// elbDescribeTags answers the tags of 1 to 20 resources (R75).
func (s *Server) elbDescribeTags(rg *region, c *call) (any, *apiError) {
	arns := c.form.list("ResourceArns.member")
	if len(arns) < 1 || len(arns) > 20 {
		return nil, elbErr("ValidationError", "1 validation error detected: Value at 'resourceArns' failed to satisfy constraint: Member must have length between 1 and 20")
	}
	res := &elbTagsResult{}
	for _, a := range arns {
		tags, e := rg.elb().tagged(a)
		if e != nil {
			return nil, e
		}
		d := tagDescriptionXML{ResourceArn: a}
		for _, k := range sortedKeys(*tags) {
			d.Tags = append(d.Tags, elbTagXML{Key: k, Value: (*tags)[k]})
		}
		res.TagDescriptions = append(res.TagDescriptions, d)
	}
	return res, nil
}

// What the fake answers, in the SDK's element names (response_snapshot/<Action>.response.snap).

type elbLoadBalancersResult struct {
	LoadBalancers []lbXML `xml:"LoadBalancers>member"`
	NextMarker    string  `xml:"NextMarker,omitempty"`
}

type lbXML struct {
	AvailabilityZones     []lbZoneXML `xml:"AvailabilityZones>member"`
	CanonicalHostedZoneID string      `xml:"CanonicalHostedZoneId"`
	CreatedTime           string      `xml:"CreatedTime"`
	DNSName               string      `xml:"DNSName"`
	IPAddressType         string      `xml:"IpAddressType"`
	LoadBalancerArn       string      `xml:"LoadBalancerArn"`
	LoadBalancerName      string      `xml:"LoadBalancerName"`
	Scheme                string      `xml:"Scheme"`
	State                 struct {
		Code string `xml:"Code"`
	} `xml:"State"`
	Type  string `xml:"Type"`
	VpcID string `xml:"VpcId"`
}

type lbZoneXML struct {
	LoadBalancerAddresses []struct {
		PrivateIPv4Address string `xml:"PrivateIPv4Address"`
	} `xml:"LoadBalancerAddresses>member"`
	SubnetID string `xml:"SubnetId"`
	ZoneName string `xml:"ZoneName"`
}

func (s *Server) lbXML(lb *loadBalancer) lbXML {
	x := lbXML{
		CanonicalHostedZoneID: "Z2IFOLAFXWLO4F", CreatedTime: lb.created.Format(timeFormat), DNSName: lb.dnsName,
		IPAddressType: "ipv4", LoadBalancerArn: lb.arn, LoadBalancerName: lb.name, Scheme: lb.scheme, Type: "network", VpcID: lb.vpcID,
	}
	x.State.Code = "active"
	for _, z := range lb.zones {
		zx := lbZoneXML{SubnetID: z.subnetID, ZoneName: z.zone}
		zx.LoadBalancerAddresses = append(zx.LoadBalancerAddresses, struct {
			PrivateIPv4Address string `xml:"PrivateIPv4Address"`
		}{z.privateIP})
		x.AvailabilityZones = append(x.AvailabilityZones, zx)
	}
	return x
}

type elbTargetGroupsResult struct {
	NextMarker   string  `xml:"NextMarker,omitempty"`
	TargetGroups []tgXML `xml:"TargetGroups>member"`
}

type tgXML struct {
	HealthCheckEnabled         bool     `xml:"HealthCheckEnabled"`
	HealthCheckIntervalSeconds int      `xml:"HealthCheckIntervalSeconds"`
	HealthCheckPath            string   `xml:"HealthCheckPath,omitempty"`
	HealthCheckPort            string   `xml:"HealthCheckPort"`
	HealthCheckProtocol        string   `xml:"HealthCheckProtocol"`
	HealthCheckTimeoutSeconds  int      `xml:"HealthCheckTimeoutSeconds"`
	HealthyThresholdCount      int      `xml:"HealthyThresholdCount"`
	IPAddressType              string   `xml:"IpAddressType"`
	LoadBalancerArns           []string `xml:"LoadBalancerArns>member"`
	Matcher                    *struct {
		HTTPCode string `xml:"HttpCode"`
	} `xml:"Matcher"`
	Port                    int    `xml:"Port"`
	Protocol                string `xml:"Protocol"`
	TargetGroupArn          string `xml:"TargetGroupArn"`
	TargetGroupName         string `xml:"TargetGroupName"`
	TargetType              string `xml:"TargetType"`
	UnhealthyThresholdCount int    `xml:"UnhealthyThresholdCount"`
	VpcID                   string `xml:"VpcId"`
}

func (s *Server) tgXML(rg *region, tg *targetGroup) tgXML {
	x := tgXML{
		HealthCheckEnabled: tg.hc.enabled, HealthCheckIntervalSeconds: tg.hc.interval, HealthCheckPath: tg.hc.path,
		HealthCheckPort: tg.hc.port, HealthCheckProtocol: tg.hc.protocol, HealthCheckTimeoutSeconds: tg.hc.timeout,
		HealthyThresholdCount: tg.hc.healthy, IPAddressType: "ipv4", LoadBalancerArns: rg.elb().lbsOf(tg.arn), Port: tg.port,
		Protocol: tg.protocol, TargetGroupArn: tg.arn, TargetGroupName: tg.name, TargetType: tg.targetType,
		UnhealthyThresholdCount: tg.hc.unhealt, VpcID: tg.vpcID,
	}
	if tg.hc.matcher != "" {
		x.Matcher = &struct {
			HTTPCode string `xml:"HttpCode"`
		}{tg.hc.matcher}
	}
	return x
}

type elbListenersResult struct {
	Listeners  []listenerXML `xml:"Listeners>member"`
	NextMarker string        `xml:"NextMarker,omitempty"`
}

type listenerXML struct {
	DefaultActions []struct {
		TargetGroupArn string `xml:"TargetGroupArn"`
		Type           string `xml:"Type"`
	} `xml:"DefaultActions>member"`
	ListenerArn     string `xml:"ListenerArn"`
	LoadBalancerArn string `xml:"LoadBalancerArn"`
	Port            int    `xml:"Port"`
	Protocol        string `xml:"Protocol"`
}

func (l *listener) xml() listenerXML {
	x := listenerXML{ListenerArn: l.arn, LoadBalancerArn: l.lbARN, Port: l.port, Protocol: l.protocol}
	x.DefaultActions = append(x.DefaultActions, struct {
		TargetGroupArn string `xml:"TargetGroupArn"`
		Type           string `xml:"Type"`
	}{l.tgARN, "forward"})
	return x
}

type elbTargetHealthResult struct {
	TargetHealthDescriptions []targetHealthXML `xml:"TargetHealthDescriptions>member"`
}

type targetHealthXML struct {
	HealthCheckPort string    `xml:"HealthCheckPort"`
	Target          targetXML `xml:"Target"`
	TargetHealth    healthXML `xml:"TargetHealth"`
}

type targetXML struct {
	ID   string `xml:"Id"`
	Port int    `xml:"Port"`
}

type healthXML struct {
	Description string `xml:"Description,omitempty"`
	Reason      string `xml:"Reason,omitempty"`
	State       string `xml:"State"`
}

type elbTagsResult struct {
	TagDescriptions []tagDescriptionXML `xml:"TagDescriptions>member"`
}

type tagDescriptionXML struct {
	ResourceArn string      `xml:"ResourceArn"`
	Tags        []elbTagXML `xml:"Tags>member"`
}

type elbTagXML struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

// LoadBalancers are the region's load balancers' names, sorted; TargetGroups and Listeners likewise count
// what ELBv2 holds, for a test's look at what is left.
func (s *Server) LoadBalancers(region string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedNames(s.mustRegion(region).elb().lbs)
}

// TargetGroups are the region's target groups' names, sorted.
func (s *Server) TargetGroups(region string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedNames(s.mustRegion(region).elb().tgs)
}

// Listeners is how many listeners the region's load balancers have.
func (s *Server) Listeners(region string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mustRegion(region).elb().listeners)
}
