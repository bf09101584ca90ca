package ec2fake

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// SecurityGroup is a VPC security group.
type SecurityGroup struct {
	ID, Name, Description, VPCID string
	Tags                         map[string]string
	Ingress, Egress              []Rule
}

// Rule is one rule of a security group: a protocol ("tcp", "udp", "icmp" or "-1" for all), a port range
// (tcp and udp; -1 otherwise) and its peer, the source of an inbound rule or the destination of an outbound
// one: an IPv4 CIDR, or another security group of the account (PeerGroupID, R50).
type Rule struct {
	ID, Protocol     string
	FromPort, ToPort int
	CIDR             string
	PeerGroupID      string
	Description      string
}

type group struct {
	SecurityGroup
	unseen int // calls naming it by id it is still unknown to (Timing.UnseenGroupCalls, R46)
}

// Security group limits ("Amazon VPC quotas", Security groups: 2,500 VPC security groups per Region, 60
// inbound rules per security group).
const (
	MaxSecurityGroups = 2500
	MaxIngressRules   = 60
)

var (
	groupIDRE = regexp.MustCompile(`^sg-([0-9a-f]{8}|[0-9a-f]{17})$`)
	// groupTextRE is what CreateSecurityGroup takes in GroupName and GroupDescription ("EC2 API Reference:
	// CreateSecurityGroup": "a-z, A-Z, 0-9, spaces, and ._-:/()#,@[]+=&;{}!$*", up to 255 characters).
	groupTextRE = regexp.MustCompile(`^[a-zA-Z0-9 ._\-:/()#,@\[\]+=&;{}!$*]{1,255}$`)
)

func (rg *region) groupByID(id string) (*group, *apiError) {
	if !groupIDRE.MatchString(id) {
		return nil, ec2Err("InvalidGroupId.Malformed", "Invalid id: %q (expecting \"sg-...\")", id)
	}
	g := rg.groups[id]
	if g != nil && g.unseen > 0 {
		// Made, but its id has not reached this part of EC2 yet (R46).
		g.unseen--
		g = nil
	}
	if g == nil {
		return nil, ec2Err("InvalidGroup.NotFound", "The security group '%s' does not exist", id)
	}
	return g, nil
}

// groupByName finds a group by name in a VPC; names are case-insensitive ("EC2 API Reference:
// CreateSecurityGroup", GroupName: "Names are case-insensitive and must be unique within the VPC").
func (rg *region) groupByName(vpcID, name string) *group {
	for _, id := range sortedKeys(rg.groups) {
		if g := rg.groups[id]; g.VPCID == vpcID && strings.EqualFold(g.Name, name) {
			return g
		}
	}
	return nil
}

// namedGroup resolves GroupId or, in the default VPC only, GroupName.
func (rg *region) namedGroup(f form) (*group, *apiError) {
	if id := f.str("GroupId"); id != "" {
		return rg.groupByID(id)
	}
	name := f.str("GroupName")
	if name == "" {
		return nil, ec2Err("MissingParameter", "The request must contain the parameter groupName or groupId")
	}
	vpc := rg.defaultVPC()
	if vpc == nil {
		return nil, ec2Err("VPCIdNotSpecified", "No default VPC for this user")
	}
	g := rg.groupByName(vpc.ID, name)
	if g == nil {
		return nil, ec2Err("InvalidGroup.NotFound", "The security group '%s' does not exist in default VPC '%s'", name, vpc.ID)
	}
	return g, nil
}

// createSecurityGroup makes a group ("EC2 API Reference: CreateSecurityGroup"): in VpcId, or the default
// VPC; its name unique in the VPC (InvalidGroup.Duplicate); an egress rule allowing everything.
func (s *Server) createSecurityGroup(rg *region, f form) (any, *apiError) {
	name, desc := f.str("GroupName"), f.str("GroupDescription")
	switch {
	case name == "":
		return nil, ec2Err("MissingParameter", "The request must contain the parameter GroupName")
	case desc == "":
		return nil, ec2Err("MissingParameter", "The request must contain the parameter GroupDescription")
	case !groupTextRE.MatchString(name) || strings.HasPrefix(strings.ToLower(name), "sg-"):
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter GroupName is invalid. Group names may not be in the format sg-*, are up to 255 characters of a-z, A-Z, 0-9, spaces, and ._-:/()#,@[]+=&;{}!$*.", name)
	case !groupTextRE.MatchString(desc):
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter GroupDescription is invalid. Character sets beyond ASCII are not supported.", desc)
	}
	var vpc *VPC
	if id := f.str("VpcId"); id != "" {
		vpc = rg.vpcs[id]
		if vpc == nil {
			return nil, ec2Err("InvalidVpcID.NotFound", "The vpc ID '%s' does not exist", id)
		}
	} else if vpc = rg.defaultVPC(); vpc == nil {
		return nil, ec2Err("VPCIdNotSpecified", "No default VPC for this user")
	}
	if rg.groupByName(vpc.ID, name) != nil {
		return nil, ec2Err("InvalidGroup.Duplicate", "The security group '%s' already exists for VPC '%s'", name, vpc.ID)
	}
	if len(rg.groups) >= MaxSecurityGroups {
		return nil, ec2Err("SecurityGroupLimitExceeded", "The maximum number of security groups has been reached.")
	}
	tags, e := tagsFor(f, "security-group")
	if e != nil {
		return nil, e
	}
	g := &group{SecurityGroup: SecurityGroup{ID: s.nextID("sg"), Name: name, Description: desc, VPCID: vpc.ID, Tags: tags}, unseen: s.timing.UnseenGroupCalls}
	g.Egress = []Rule{{ID: s.nextID("sgr"), Protocol: "-1", FromPort: -1, ToPort: -1, CIDR: "0.0.0.0/0"}}
	rg.groups[g.ID] = g
	return &createGroupXML{GroupID: g.ID, Tags: tagSet(tags), Arn: s.groupArn(rg, g.ID)}, nil
}

func (s *Server) groupArn(rg *region, id string) string {
	return "arn:aws:ec2:" + rg.name + ":" + s.opts.AccountID + ":security-group/" + id
}

// permissions reads IpPermissions.N (or the legacy top-level IpProtocol, FromPort, ToPort and CidrIp of an
// inbound rule) as rules, checking each: a protocol (tcp, udp, icmp, -1 or a number), both ports for tcp and
// udp in 0..65535, from <= to, IPv4 CIDRs in canonical form, and peer groups (an inbound rule's sources, an
// outbound rule's destinations) of the region by id (R50). Other peers are not modelled.
func permissions(rg *region, f form) ([]Rule, *apiError) {
	var perms []string
	for _, n := range f.indexes("IpPermissions") {
		perms = append(perms, fmt.Sprintf("IpPermissions.%d.", n))
	}
	if len(perms) == 0 && f.has("IpProtocol") {
		perms = append(perms, "")
	}
	if len(perms) == 0 {
		return nil, ec2Err("MissingParameter", "The request must contain the parameter IpPermissions")
	}
	var out []Rule
	for _, p := range perms {
		for _, other := range []string{"Ipv6Ranges", "PrefixListIds"} {
			if p != "" && f.anyUnder(p+other) {
				return nil, notModelled("security group rules with " + other)
			}
		}
		var peers []string
		if p != "" {
			for _, n := range f.indexes(p + "Groups") {
				q := fmt.Sprintf("%sGroups.%d.", p, n)
				for _, field := range []string{"UserId", "GroupName", "VpcId", "VpcPeeringConnectionId", "PeeringStatus"} {
					if f.has(q + field) {
						return nil, notModelled("a peer group by " + field)
					}
				}
				peer, e := rg.groupByID(f.str(q + "GroupId"))
				if e != nil {
					return nil, e
				}
				peers = append(peers, peer.ID)
			}
		}
		if p == "" && f.has("SourceSecurityGroupName") {
			return nil, notModelled("security group rules with SourceSecurityGroupName")
		}
		proto, e := protocol(f.str(p + "IpProtocol"))
		if e != nil {
			return nil, e
		}
		from, to := -1, -1
		if proto == "tcp" || proto == "udp" {
			var hasFrom, hasTo bool
			var ef, et *apiError
			from, hasFrom, ef = f.integer(p + "FromPort")
			to, hasTo, et = f.integer(p + "ToPort")
			switch {
			case ef != nil:
				return nil, ef
			case et != nil:
				return nil, et
			case !hasFrom || !hasTo:
				return nil, ec2Err("InvalidParameterValue", "Invalid value 'Must specify both from and to ports with TCP/UDP.' for portRange.")
			case from < 0 || to > 65535 || from > to:
				return nil, ec2Err("InvalidParameterValue", "Invalid value 'Invalid TCP/UDP port range (%d-%d).' for portRange.", from, to)
			}
		}
		var cidrs, descs []string
		if p == "" {
			cidrs, descs = []string{f.str("CidrIp")}, []string{""}
		} else {
			for _, n := range f.indexes(p + "IpRanges") {
				q := fmt.Sprintf("%sIpRanges.%d.", p, n)
				cidrs = append(cidrs, f.str(q+"CidrIp"))
				descs = append(descs, f.str(q+"Description"))
			}
		}
		if len(cidrs) == 0 && len(peers) == 0 {
			return nil, ec2Err("InvalidParameterValue", "The request must contain a source for each permission: IpRanges, Ipv6Ranges, PrefixListIds or UserIdGroupPairs.")
		}
		for _, peer := range peers {
			out = append(out, Rule{Protocol: proto, FromPort: from, ToPort: to, PeerGroupID: peer})
		}
		for i, c := range cidrs {
			if e := checkCIDR(c); e != nil {
				return nil, e
			}
			out = append(out, Rule{Protocol: proto, FromPort: from, ToPort: to, CIDR: c, Description: descs[i]})
		}
	}
	return out, nil
}

// protocol normalizes an IpProtocol: names, or numbers 0..255 (6, 17 and 1 are tcp, udp and icmp).
func protocol(p string) (string, *apiError) {
	switch strings.ToLower(p) {
	case "tcp", "6":
		return "tcp", nil
	case "udp", "17":
		return "udp", nil
	case "icmp", "1":
		return "icmp", nil
	case "-1", "all":
		return "-1", nil
	case "":
		return "", ec2Err("MissingParameter", "The request must contain the parameter ipProtocol")
	}
	if n, err := strconv.Atoi(p); err == nil && n >= 0 && n <= 255 {
		return p, nil
	}
	return "", ec2Err("InvalidParameterValue", "Invalid value '%s' for IP protocol. Unknown protocol.", p)
}

// checkCIDR accepts an IPv4 CIDR block in canonical form (no bits set past the prefix).
func checkCIDR(c string) *apiError {
	p, err := netip.ParsePrefix(c)
	if err != nil || !p.Addr().Is4() || p.Masked() != p {
		return ec2Err("InvalidParameterValue", "CIDR block %s is malformed", c)
	}
	return nil
}

func sameRule(a, b Rule) bool {
	return a.Protocol == b.Protocol && a.FromPort == b.FromPort && a.ToPort == b.ToPort && a.CIDR == b.CIDR && a.PeerGroupID == b.PeerGroupID
}

// peer is a rule's source as EC2's words name it.
func (r Rule) peer() string {
	if r.PeerGroupID != "" {
		return r.PeerGroupID
	}
	return r.CIDR
}

func ruleWords(r Rule) string {
	proto := strings.ToUpper(r.Protocol)
	if r.Protocol == "-1" {
		proto = "ALL"
	}
	if r.FromPort < 0 {
		return fmt.Sprintf("peer: %s, %s, ALLOW", r.peer(), proto)
	}
	return fmt.Sprintf("peer: %s, %s, from port: %d, to port: %d, ALLOW", r.peer(), proto, r.FromPort, r.ToPort)
}

// authorizeIngress adds inbound rules ("EC2 API Reference: AuthorizeSecurityGroupIngress"): all or none; a
// rule the group has, or one given twice, is InvalidPermission.Duplicate.
func (s *Server) authorizeIngress(rg *region, f form) (any, *apiError) {
	return s.authorize(rg, f, false)
}

// authorizeEgress adds outbound rules ("EC2 API Reference: AuthorizeSecurityGroupEgress") as authorizeIngress
// adds inbound ones, to the group by id, each rule's destination in IpPermissions (egressGroup).
func (s *Server) authorizeEgress(rg *region, f form) (any, *apiError) {
	return s.authorize(rg, f, true)
}

// rules is the group's inbound rules, or its outbound ones.
func (g *group) rules(egress bool) *[]Rule {
	if egress {
		return &g.Egress
	}
	return &g.Ingress
}

// ruleGroup is the group a request to change its inbound rules names (by id, or by name in the default
// VPC), or its outbound ones (egressGroup).
func (rg *region) ruleGroup(f form, egress bool) (*group, *apiError) {
	if egress {
		return rg.egressGroup(f)
	}
	return rg.namedGroup(f)
}

// egressGroup is the group AuthorizeSecurityGroupEgress and RevokeSecurityGroupEgress name: by GroupId only
// (neither action has GroupName). Their top-level rule parameters are "Not supported. Use IP permissions
// instead" (each action's page): CidrIp is UnknownParameter, as EC2 answers it (seen in public logs); the
// others the fake does not model (a public report has EC2 ignore them).
func (rg *region) egressGroup(f form) (*group, *apiError) {
	if f.has("CidrIp") {
		return nil, ec2Err("UnknownParameter", "The parameter CidrIp is not recognized")
	}
	for _, p := range []string{"IpProtocol", "FromPort", "ToPort", "SourceSecurityGroupName", "SourceSecurityGroupOwnerId"} {
		if f.has(p) {
			return nil, notModelled("an outbound rule's top-level " + p + " (not supported by EC2: IpPermissions)")
		}
	}
	return rg.groupByID(f.str("GroupId")) // required by the SDK
}

// authorize adds inbound or outbound rules: all or none; a rule the group has in that direction, or one given
// twice, is InvalidPermission.Duplicate; each direction holds at most MaxRulesPerGroup ("Amazon VPC quotas":
// inbound and outbound rules are counted apart).
func (s *Server) authorize(rg *region, f form, egress bool) (any, *apiError) {
	g, e := rg.ruleGroup(f, egress)
	if e != nil {
		return nil, e
	}
	rules, e := permissions(rg, f)
	if e != nil {
		return nil, e
	}
	tags, e := tagsFor(f, "security-group-rule")
	if e != nil {
		return nil, e
	}
	have := g.rules(egress)
	for i, r := range rules {
		for _, old := range append(append([]Rule(nil), *have...), rules[:i]...) {
			if sameRule(r, old) {
				return nil, ec2Err("InvalidPermission.Duplicate", "the specified rule %q already exists", ruleWords(r))
			}
		}
	}
	if len(*have)+len(rules) > s.opts.MaxRulesPerGroup {
		return nil, ec2Err("RulesPerSecurityGroupLimitExceeded", "The maximum number of rules per security group has been reached.")
	}
	out := &authorizeXML{Return: true}
	for _, r := range rules {
		r.ID = s.nextID("sgr")
		*have = append(*have, r)
		out.Rules.Items = append(out.Rules.Items, s.ruleXML(g, r, egress, tags))
	}
	return out, nil
}

// revokeIngress removes inbound rules ("EC2 API Reference: RevokeSecurityGroupIngress"): by rule id, or by
// properties matching exactly. Properties matching nothing: in the default VPC the request succeeds and
// lists them in unknownIpPermissionSet; elsewhere it is InvalidPermission.NotFound and nothing is revoked.
func (s *Server) revokeIngress(rg *region, f form) (any, *apiError) {
	return s.revoke(rg, f, false)
}

// revokeEgress removes outbound rules ("EC2 API Reference: RevokeSecurityGroupEgress") as revokeIngress
// removes inbound ones, from the group by id (egressGroup).
func (s *Server) revokeEgress(rg *region, f form) (any, *apiError) {
	return s.revoke(rg, f, true)
}

func (s *Server) revoke(rg *region, f form, egress bool) (any, *apiError) {
	g, e := rg.ruleGroup(f, egress)
	if e != nil {
		return nil, e
	}
	have := g.rules(egress)
	out := &revokeXML{Return: true}
	if ids := f.list("SecurityGroupRuleId"); len(ids) > 0 {
		for _, id := range ids {
			if indexOfRule(*have, func(r Rule) bool { return r.ID == id }) < 0 {
				return nil, ec2Err("InvalidSecurityGroupRuleId.NotFound", "The security group rule ID '%s' does not exist", id)
			}
		}
		for _, id := range ids {
			i := indexOfRule(*have, func(r Rule) bool { return r.ID == id })
			out.Revoked.Items = append(out.Revoked.Items, revokedXML{id, g.ID})
			*have = append((*have)[:i], (*have)[i+1:]...)
		}
		return out, nil
	}
	rules, e := permissions(rg, f)
	if e != nil {
		return nil, e
	}
	var unknown []Rule
	for _, r := range rules {
		if indexOfRule(*have, func(old Rule) bool { return sameRule(r, old) }) < 0 {
			unknown = append(unknown, r)
		}
	}
	if len(unknown) > 0 {
		if vpc := rg.vpcs[g.VPCID]; vpc == nil || !vpc.Default {
			return nil, ec2Err("InvalidPermission.NotFound", "The specified rule does not exist in this security group.")
		}
		for _, r := range unknown {
			out.Unknown = append(out.Unknown, permissionXML(r, s.opts.AccountID))
		}
	}
	for _, r := range rules {
		if i := indexOfRule(*have, func(old Rule) bool { return sameRule(r, old) }); i >= 0 {
			out.Revoked.Items = append(out.Revoked.Items, revokedXML{(*have)[i].ID, g.ID})
			*have = append((*have)[:i], (*have)[i+1:]...)
		}
	}
	return out, nil
}

func indexOfRule(rules []Rule, match func(Rule) bool) int {
	for i, r := range rules {
		if match(r) {
			return i
		}
	}
	return -1
}

// deleteSecurityGroup deletes a group ("EC2 API Reference: DeleteSecurityGroup"): not a VPC's default
// group (CannotDelete), nor one an instance that is not terminated uses, nor one another group's inbound or
// outbound rule names (DependencyViolation).
func (s *Server) deleteSecurityGroup(rg *region, f form) (any, *apiError) {
	g, e := rg.namedGroup(f)
	if e != nil {
		return nil, e
	}
	if g.Name == "default" {
		return nil, ec2Err("CannotDelete", "the specified group: \"%s\" name: \"default\" cannot be deleted by a user", g.ID)
	}
	// Another group's rule naming it, as the source of an inbound rule or the destination of an outbound one,
	// holds it, as an instance using it does (R50); EC2's words are the same for all.
	for _, other := range rg.groups {
		if other.ID == g.ID {
			continue
		}
		for _, r := range append(append([]Rule(nil), other.Ingress...), other.Egress...) {
			if r.PeerGroupID == g.ID {
				return nil, ec2Err("DependencyViolation", "resource %s has a dependent object", g.ID)
			}
		}
	}
	for _, in := range rg.instances {
		if in.State == StateTerminated {
			continue
		}
		for _, id := range in.SecurityGroupIDs {
			if id == g.ID {
				return nil, ec2Err("DependencyViolation", "resource %s has a dependent object", g.ID)
			}
		}
	}
	delete(rg.groups, g.ID)
	return &deleteGroupXML{Return: true, GroupID: g.ID}, nil
}

// describeSecurityGroups lists groups ("EC2 API Reference: DescribeSecurityGroups"): by GroupId, by
// GroupName (default VPC only), by filter, in pages of 5 to 1000.
func (s *Server) describeSecurityGroups(rg *region, f form) (any, *apiError) {
	want := map[string]bool{}
	for _, id := range f.list("GroupId") {
		g, e := rg.groupByID(id)
		if e != nil {
			return nil, e
		}
		want[g.ID] = true
	}
	for _, name := range f.list("GroupName") {
		vpc := rg.defaultVPC()
		var g *group
		if vpc != nil {
			g = rg.groupByName(vpc.ID, name)
		}
		if g == nil {
			return nil, ec2Err("InvalidGroup.NotFound", "The security group '%s' does not exist in default VPC '%s'", name, vpcIDOf(vpc))
		}
		want[g.ID] = true
	}
	filters, e := f.filters(groupFilters)
	if e != nil {
		return nil, e
	}
	var list []*group
	for _, id := range sortedKeys(rg.groups) {
		g := rg.groups[id]
		if (len(want) == 0 || want[id]) && matches(filters, g.fields(s), g.Tags) {
			list = append(list, g)
		}
	}
	page, next, e := paginate(f, "DescribeSecurityGroups", list, 5, 1000)
	if e != nil {
		return nil, e
	}
	out := &describeGroupsXML{NextToken: next}
	for _, g := range page {
		out.Groups.Items = append(out.Groups.Items, s.groupXML(rg, g))
	}
	return out, nil
}

func vpcIDOf(v *VPC) string {
	if v == nil {
		return ""
	}
	return v.ID
}

var groupFilters = map[string]bool{"group-id": true, "group-name": true, "vpc-id": true, "description": true, "owner-id": true,
	"ip-permission.group-id": true, "egress.ip-permission.group-id": true}

func (g *group) fields(s *Server) filterFields {
	return func(name string) []string {
		switch name {
		case "group-id":
			return []string{g.ID}
		case "group-name":
			return []string{g.Name}
		case "vpc-id":
			return []string{g.VPCID}
		case "description":
			return []string{g.Description}
		case "owner-id":
			return []string{s.opts.AccountID}
		case "ip-permission.group-id":
			// The groups its inbound rules name as sources (R50).
			return peerGroups(g.Ingress)
		case "egress.ip-permission.group-id":
			// The groups its outbound rules name as destinations (R50).
			return peerGroups(g.Egress)
		}
		return nil
	}
}

// peerGroups are the groups rules name.
func peerGroups(rules []Rule) []string {
	var ids []string
	for _, r := range rules {
		if r.PeerGroupID != "" {
			ids = append(ids, r.PeerGroupID)
		}
	}
	return ids
}

// SecurityGroups lists a region's security groups, sorted by id.
func (s *Server) SecurityGroups(region string) []SecurityGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	var out []SecurityGroup
	for _, id := range sortedKeys(rg.groups) {
		out = append(out, rg.groups[id].snapshot())
	}
	return out
}

// SecurityGroup returns a group by id.
func (s *Server) SecurityGroup(region, id string) (SecurityGroup, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.mustRegion(region).groups[id]
	if g == nil {
		return SecurityGroup{}, false
	}
	return g.snapshot(), true
}

func (g *group) snapshot() SecurityGroup {
	out := g.SecurityGroup
	out.Tags = copyTags(g.Tags)
	out.Ingress = append([]Rule(nil), g.Ingress...)
	out.Egress = append([]Rule(nil), g.Egress...)
	sort.SliceStable(out.Ingress, func(i, j int) bool { return out.Ingress[i].ID < out.Ingress[j].ID })
	return out
}
