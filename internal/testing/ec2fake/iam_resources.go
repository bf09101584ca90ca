package ec2fake

import (
	"encoding/json"
	"strings"
)

// What each request needs allowed (R52 to R55), as the Service Authorization Reference lists each action's
// resource types and condition keys, with ARNs as AWS builds them:
//
//   - EC2 ("Actions, resources, and condition keys for Amazon EC2"): arn:aws:ec2:<region>:<account>:<type>/<id>
//     for instance, volume, security-group, subnet, vpc, network-interface, elastic-ip and
//     spot-instances-request; arn:aws:ec2:<region>::image/<id> (no account) for an image; a resource a
//     request makes is <type>/*, with the tags it asks for as aws:RequestTag/<key>; one that exists carries its
//     tags as aws:ResourceTag/<key>. Describe actions have no resource-level permissions: "*".
//   - tags at creation ("Grant permission to tag Amazon EC2 resources during creation"): a create with
//     TagSpecifications also needs ec2:CreateTags on what it makes, with ec2:CreateAction naming the create.
//   - iam:PassRole ("Grant a user permissions to pass a role to an AWS service"): a launch with an instance
//     profile passes its role, iam:PassedToService = ec2.amazonaws.com.
//   - SSM ("Actions, resources, and condition keys for AWS Systems Manager"): each parameter a request names,
//     arn:aws:ssm:<region>:<account>:parameter/<name without its leading slash>; AWS's public parameters
//     (/aws/service/...) have no account in their ARN. A PutParameter with Tags also needs
//     ssm:AddTagsToResource (the CloudFormation resource AWS::SSM::Parameter: "To create an SSM parameter,
//     you must have ... ssm:PutParameter and ssm:AddTagsToResource").
//   - KMS through SSM ("How AWS Systems Manager Parameter Store uses AWS KMS"): a SecureString under a key
//     other than alias/aws/ssm needs kms:Encrypt (Standard tier) or kms:GenerateDataKey (Advanced) to be
//     written and kms:Decrypt to be read WithDecryption, on the key, with kms:ViaService =
//     ssm.<region>.amazonaws.com and kms:EncryptionContext:PARAMETER_ARN = the parameter's ARN.
//   - Service Quotas: arn:aws:servicequotas:<region>:<account>:<service code>/<quota code>.
//   - STS: GetCallerIdentity needs no permission ("STS API Reference: GetCallerIdentity": "No permissions
//     are required to perform this operation"); AssumeRole needs sts:AssumeRole on the role (sts.go).
//
// A resource a request names that does not exist is left to the action, which answers NotFound as before:
// the order in which AWS checks existence and permission is not documented.

func (s *Server) ec2ARN(rg *region, typ, id string) string {
	return "arn:aws:ec2:" + rg.name + ":" + s.opts.AccountID + ":" + typ + "/" + id
}

// taggedResource is the ARN and tags of an existing EC2 resource by its id; ok is false when there is none.
func (s *Server) taggedResource(rg *region, id string) (arn string, tags map[string]string, ok bool) {
	prefix, _, _ := strings.Cut(id, "-")
	switch prefix {
	case "i":
		if in := rg.instances[id]; in != nil && !in.gone {
			return s.ec2ARN(rg, "instance", id), in.Tags, true
		}
	case "vol":
		if v := rg.volumes[id]; v != nil {
			return s.ec2ARN(rg, "volume", id), v.Tags, true
		}
	case "sg":
		if g := rg.groups[id]; g != nil {
			return s.ec2ARN(rg, "security-group", id), g.Tags, true
		}
	case "eipalloc":
		if a := rg.addresses[id]; a != nil {
			return s.ec2ARN(rg, "elastic-ip", id), a.Tags, true
		}
	case "subnet":
		if sn := rg.subnets[id]; sn != nil {
			return s.ec2ARN(rg, "subnet", id), sn.Tags, true
		}
	case "vpc":
		if rg.vpcs[id] != nil {
			return s.ec2ARN(rg, "vpc", id), nil, true
		}
	}
	return "", nil, false
}

// ec2Authorizations are what an EC2 request needs allowed. The caller holds s.mu.
func (s *Server) ec2Authorizations(rg *region, c *call) []authzRequest {
	base := s.baseContext(c)
	action := "ec2:" + c.action
	f := c.form
	var reqs []authzRequest
	add := func(action, resource string, tags, requestTags map[string]string, kv ...string) {
		ctx := base.with(kv...)
		ctx.tags, ctx.requestTags = tags, requestTags
		reqs = append(reqs, authzRequest{action: action, resource: resource, ctx: ctx})
	}
	existing := func(ids ...string) {
		for _, id := range ids {
			if arn, tags, ok := s.taggedResource(rg, id); ok {
				add(action, arn, tags, nil)
			}
		}
	}
	// made is a resource the request makes, with the tags it asks for, and the ec2:CreateTags those tags need.
	made := func(typ string, tags map[string]string) {
		add(action, s.ec2ARN(rg, typ, "*"), nil, tags)
		if len(tags) > 0 {
			add("ec2:CreateTags", s.ec2ARN(rg, typ, "*"), nil, tags, "ec2:CreateAction", c.action)
		}
	}
	switch c.action {
	case "RunInstances":
		s.runInstancesAuthorizations(rg, c, made, existing, add)
	case "CreateSecurityGroup":
		tags, _ := tagsFor(f, "security-group") // refused by the action when they do not parse
		made("security-group", tags)
		vpc := f.str("VpcId")
		if d := rg.defaultVPC(); vpc == "" && d != nil {
			vpc = d.ID
		}
		existing(vpc)
	case "AllocateAddress":
		tags, _ := tagsFor(f, "elastic-ip")
		made("elastic-ip", tags)
	case "CreateTags", "DeleteTags":
		var requested map[string]string
		if c.action == "CreateTags" {
			requested = map[string]string{}
			for _, t := range f.tags("Tag") {
				requested[t.Key] = t.Value
			}
		}
		for _, id := range f.list("ResourceId") {
			if arn, tags, ok := s.taggedResource(rg, id); ok {
				add(action, arn, tags, requested)
			}
		}
	case "TerminateInstances":
		existing(f.list("InstanceId")...)
	case "CreateReplaceRootVolumeTask":
		// The task it makes, the instance, and the image the new root volume comes from (R77).
		tags, _ := tagsFor(f, "replace-root-volume-task")
		made("replace-root-volume-task", tags)
		existing(f.str("InstanceId"))
		if img := f.str("ImageId"); img != "" {
			add(action, "arn:aws:ec2:"+rg.name+"::image/"+img, nil, nil)
		}
	case "AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress", "AuthorizeSecurityGroupEgress", "RevokeSecurityGroupEgress", "DeleteSecurityGroup":
		id := f.str("GroupId")
		if name := f.str("GroupName"); id == "" && name != "" {
			if d := rg.defaultVPC(); d != nil {
				if g := rg.groupByName(d.ID, name); g != nil {
					id = g.ID
				}
			}
		}
		existing(id)
	case "AssociateAddress", "DisassociateAddress", "ReleaseAddress":
		existing(s.addressOf(rg, f)...)
		if c.action == "AssociateAddress" {
			existing(f.str("InstanceId"))
		}
	default:
		// Describe actions support no resource-level permissions.
		add(action, "*", nil, nil)
	}
	return reqs
}

// addressOf is the allocation id an address request names, by allocation id, public IP or association id.
func (s *Server) addressOf(rg *region, f form) []string {
	if id := f.str("AllocationId"); id != "" {
		return []string{id}
	}
	for _, id := range sortedKeys(rg.addresses) {
		a := rg.addresses[id]
		if ip := f.str("PublicIp"); ip != "" && a.PublicIP == ip {
			return []string{id}
		}
	}
	if assoc := f.str("AssociationId"); assoc != "" {
		if id, ok := rg.associations[assoc]; ok {
			return []string{id}
		}
	}
	return nil
}

// runInstancesAuthorizations: a launch makes an instance, its root volume and its network interface (and a
// Spot request), launches from an image into a subnet with security groups, and passes its instance
// profile's role ("Actions, resources, and condition keys for Amazon EC2": RunInstances).
func (s *Server) runInstancesAuthorizations(rg *region, c *call, made func(string, map[string]string), existing func(...string),
	add func(action, resource string, tags, requestTags map[string]string, kv ...string)) {
	f := c.form
	instanceTags, volumeTags, _ := launchTags(f.tagSpecs()) // refused by the action when they do not parse
	made("instance", instanceTags)
	made("volume", volumeTags)
	made("network-interface", nil)
	if f.str("InstanceMarketOptions.MarketType") == "spot" {
		made("spot-instances-request", nil)
	}
	if img := f.str("ImageId"); img != "" {
		add("ec2:RunInstances", "arn:aws:ec2:"+rg.name+"::image/"+img, nil, nil)
	}
	var vpc string
	if sn, e := launchSubnet(rg, f.str("SubnetId")); e == nil {
		vpc = sn.VPCID
		existing(sn.ID)
	}
	groups := f.list("SecurityGroupId")
	for _, name := range f.list("SecurityGroup") {
		if g := rg.groupByName(vpc, name); g != nil {
			groups = append(groups, g.ID)
		}
	}
	if len(groups) == 0 {
		if g := rg.groupByName(vpc, "default"); g != nil {
			groups = append(groups, g.ID)
		}
	}
	existing(groups...)
	profile := f.str("IamInstanceProfile.Arn")
	if profile == "" {
		profile = f.str("IamInstanceProfile.Name")
	}
	if profile != "" {
		// The role the profile holds when it was made through IAM's API (R62); otherwise the role of its own
		// name, as the console makes them.
		add("iam:PassRole", s.passedRole(profile), nil, nil, "iam:PassedToService", "ec2.amazonaws.com")
	}
}

// ssmAuthorizations are what an SSM request needs allowed: its action on each parameter it names, the
// tagging a PutParameter with Tags does, and KMS for a SecureString under a customer key. The caller holds
// s.mu.
func (s *Server) ssmAuthorizations(rg *region, c *call) []authzRequest {
	var in struct {
		Name, ResourceId, Path, Type, KeyId, Tier, Value string // SSM's member names
		Names                                            []string
		Tags                                             []ssmTag
		WithDecryption                                   bool
	}
	_ = json.Unmarshal(c.body, &in) // a body that does not parse is refused by the action itself
	base := s.baseContext(c)
	var requested map[string]string
	if len(in.Tags) > 0 {
		requested = map[string]string{}
		for _, t := range in.Tags {
			requested[t.Key] = t.Value
		}
	}
	var names []string
	switch {
	case len(in.Names) > 0:
		names = in.Names
	case in.ResourceId != "":
		names = []string{in.ResourceId}
	case in.Path != "":
		names = []string{in.Path}
	case in.Name != "":
		names = []string{in.Name}
	}
	var reqs []authzRequest
	for _, ref := range names {
		name, arn := s.parameterRef(rg, ref)
		p := rg.params[name]
		ctx := base
		if p != nil {
			ctx.tags = p.Tags
		}
		ctx.requestTags = requested
		reqs = append(reqs, authzRequest{action: "ssm:" + c.action, resource: arn, ctx: ctx})
		switch c.action {
		case "PutParameter":
			if len(in.Tags) > 0 {
				reqs = append(reqs, authzRequest{action: "ssm:AddTagsToResource", resource: arn, ctx: ctx})
			}
			typ, key := in.Type, in.KeyId
			if p != nil && typ == "" {
				typ = p.Type
			}
			if typ != "SecureString" {
				continue
			}
			kmsAction := "kms:Encrypt"
			if tier, _ := s.tierOf(rg, in.Tier, p, len(in.Value)); tier == "Advanced" {
				kmsAction = "kms:GenerateDataKey"
			}
			reqs = append(reqs, s.kmsAuthorization(rg, base, kmsAction, key, arn)...)
		case "GetParameter", "GetParameters":
			if in.WithDecryption && p != nil && p.Type == "SecureString" {
				reqs = append(reqs, s.kmsAuthorization(rg, base, "kms:Decrypt", p.KeyID, arn)...)
			}
		}
	}
	return reqs
}

// parameterRef is the name and ARN of the parameter a request names by name, name:version or ARN.
func (s *Server) parameterRef(rg *region, ref string) (name, arn string) {
	name = ref
	if rest, ok := strings.CutPrefix(ref, s.paramArnPrefix(rg)); ok {
		name = rest
		if !strings.HasPrefix(name, "/") && rg.params[name] == nil {
			name = "/" + name
		}
	}
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	account := s.opts.AccountID
	if strings.HasPrefix(name, "/aws/") {
		account = "" // AWS's public parameters are no account's
	}
	return name, "arn:aws:ssm:" + rg.name + ":" + account + ":parameter/" + strings.TrimPrefix(name, "/")
}

// kmsAuthorization is what SSM asks KMS for, as the caller, on the key of a SecureString: nothing under the
// account's default key alias/aws/ssm, whose key policy lets every principal of the account use it through
// SSM; for another key, the action on the key's ARN (an alias is authorized as the alias's ARN: the fake
// knows no key behind it).
func (s *Server) kmsAuthorization(rg *region, base requestContext, action, keyID, parameterARN string) []authzRequest {
	if keyID == "" || keyID == DefaultParameterKey || strings.HasSuffix(keyID, ":"+DefaultParameterKey) {
		return nil
	}
	arn := keyID
	switch {
	case strings.HasPrefix(keyID, "arn:"):
	case strings.HasPrefix(keyID, "alias/"):
		arn = "arn:aws:kms:" + rg.name + ":" + s.opts.AccountID + ":" + keyID
	default:
		arn = "arn:aws:kms:" + rg.name + ":" + s.opts.AccountID + ":key/" + keyID
	}
	ctx := base.with("kms:ViaService", "ssm."+rg.name+".amazonaws.com", "kms:EncryptionContext:PARAMETER_ARN", parameterARN,
		"kms:CallerAccount", s.opts.AccountID)
	return []authzRequest{{action: action, resource: arn, ctx: ctx}}
}

// sqAuthorizations: GetServiceQuota on the quota's ARN. A request without both codes is refused by the
// action.
func (s *Server) sqAuthorizations(c *call) []authzRequest {
	var in struct{ ServiceCode, QuotaCode string }
	_ = json.Unmarshal(c.body, &in)
	if in.ServiceCode == "" || in.QuotaCode == "" {
		return nil
	}
	arn := "arn:aws:servicequotas:" + c.region + ":" + s.opts.AccountID + ":" + in.ServiceCode + "/" + in.QuotaCode
	return []authzRequest{{action: "servicequotas:" + c.action, resource: arn, ctx: s.baseContext(c)}}
}
