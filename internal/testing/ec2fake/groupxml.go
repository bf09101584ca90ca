package ec2fake

// The XML of security groups and their rules: the element names the SDK's deserializer reads
// (awsEc2query_deserializeDocumentSecurityGroup, ...IpPermission, ...SecurityGroupRule).

type ipRangeXML struct {
	CidrIP      string `xml:"cidrIp"`
	Description string `xml:"description,omitempty"`
}

// groupPairXML is a source group of a rule (UserIdGroupPair).
type groupPairXML struct {
	UserID  string `xml:"userId"`
	GroupID string `xml:"groupId"`
}

type ipPermissionXML struct {
	IPProtocol string            `xml:"ipProtocol"`
	FromPort   *int              `xml:"fromPort,omitempty"`
	ToPort     *int              `xml:"toPort,omitempty"`
	Groups     set[groupPairXML] `xml:"groups"`
	IPRanges   set[ipRangeXML]   `xml:"ipRanges"`
	IPv6Ranges set[struct{}]     `xml:"ipv6Ranges"`
	PrefixList set[struct{}]     `xml:"prefixListIds"`
}

type securityGroupXML struct {
	OwnerID     string               `xml:"ownerId"`
	GroupName   string               `xml:"groupName"`
	GroupID     string               `xml:"groupId"`
	Description string               `xml:"groupDescription"`
	Ingress     set[ipPermissionXML] `xml:"ipPermissions"`
	Egress      set[ipPermissionXML] `xml:"ipPermissionsEgress"`
	VpcID       string               `xml:"vpcId"`
	Arn         string               `xml:"securityGroupArn"`
	Tags        *set[tagXML]         `xml:"tagSet,omitempty"`
}

type describeGroupsXML struct {
	meta
	Groups    set[securityGroupXML] `xml:"securityGroupInfo"`
	NextToken string                `xml:"nextToken,omitempty"`
}

type createGroupXML struct {
	meta
	GroupID string       `xml:"groupId"`
	Tags    *set[tagXML] `xml:"tagSet,omitempty"`
	Arn     string       `xml:"securityGroupArn"`
}

type deleteGroupXML struct {
	meta
	Return  bool   `xml:"return"`
	GroupID string `xml:"groupId"`
}

type ruleXML struct {
	RuleID      string       `xml:"securityGroupRuleId"`
	GroupID     string       `xml:"groupId"`
	OwnerID     string       `xml:"groupOwnerId"`
	IsEgress    bool         `xml:"isEgress"`
	IPProtocol  string       `xml:"ipProtocol"`
	FromPort    int          `xml:"fromPort"`
	ToPort      int          `xml:"toPort"`
	CidrIPv4    string       `xml:"cidrIpv4,omitempty"`
	Referenced  *refGroupXML `xml:"referencedGroupInfo,omitempty"`
	Description string       `xml:"description,omitempty"`
	Tags        *set[tagXML] `xml:"tagSet,omitempty"`
}

// refGroupXML is a rule's source group (ReferencedSecurityGroup).
type refGroupXML struct {
	GroupID string `xml:"groupId"`
	UserID  string `xml:"userId"`
}

type authorizeXML struct {
	meta
	Return bool         `xml:"return"`
	Rules  set[ruleXML] `xml:"securityGroupRuleSet"`
}

type revokedXML struct {
	RuleID  string `xml:"securityGroupRuleId"`
	GroupID string `xml:"groupId"`
}

type revokeXML struct {
	meta
	Return  bool              `xml:"return"`
	Unknown []ipPermissionXML `xml:"unknownIpPermissionSet>item,omitempty"`
	Revoked set[revokedXML]   `xml:"revokedSecurityGroupRuleSet"`
}

func permissionXML(r Rule, account string) ipPermissionXML {
	p := ipPermissionXML{IPProtocol: r.Protocol}
	if r.PeerGroupID != "" {
		p.Groups = setOf([]groupPairXML{{account, r.PeerGroupID}})
	} else {
		p.IPRanges = setOf([]ipRangeXML{{r.CIDR, r.Description}})
	}
	if r.FromPort >= 0 {
		from, to := r.FromPort, r.ToPort
		p.FromPort, p.ToPort = &from, &to
	}
	return p
}

func (s *Server) ruleXML(g *group, r Rule, egress bool, tags map[string]string) ruleXML {
	x := ruleXML{
		RuleID: r.ID, GroupID: g.ID, OwnerID: s.opts.AccountID, IsEgress: egress, IPProtocol: r.Protocol, FromPort: r.FromPort,
		ToPort: r.ToPort, CidrIPv4: r.CIDR, Description: r.Description, Tags: tagSet(tags),
	}
	if r.PeerGroupID != "" {
		x.Referenced = &refGroupXML{GroupID: r.PeerGroupID, UserID: s.opts.AccountID}
	}
	return x
}

func (s *Server) groupXML(rg *region, g *group) securityGroupXML {
	x := securityGroupXML{
		OwnerID: s.opts.AccountID, GroupName: g.Name, GroupID: g.ID, Description: g.Description, VpcID: g.VPCID,
		Arn: s.groupArn(rg, g.ID), Tags: tagSet(g.Tags),
	}
	x.Ingress.Items = mergedPermissions(g.Ingress, s.opts.AccountID)
	x.Egress.Items = mergedPermissions(g.Egress, s.opts.AccountID)
	return x
}

// mergedPermissions lists rules as EC2 describes them: one permission per protocol and port range, with
// every CIDR of it among its ipRanges.
func mergedPermissions(rules []Rule, account string) []ipPermissionXML {
	var out []ipPermissionXML
	index := map[[3]any]int{}
	for _, r := range rules {
		k := [3]any{r.Protocol, r.FromPort, r.ToPort}
		if i, ok := index[k]; ok {
			if r.PeerGroupID != "" {
				out[i].Groups.Items = append(out[i].Groups.Items, groupPairXML{account, r.PeerGroupID})
			} else {
				out[i].IPRanges.Items = append(out[i].IPRanges.Items, ipRangeXML{r.CIDR, r.Description})
			}
			continue
		}
		index[k] = len(out)
		out = append(out, permissionXML(r, account))
	}
	return out
}
