package ec2fake

import (
	"regexp"
	"strings"
)

// Address is an Elastic IP address.
type Address struct {
	AllocationID, PublicIP, Domain string
	// InstanceID, AssociationID and PrivateIP are set while it is associated.
	InstanceID, AssociationID, PrivateIP string
	Tags                                 map[string]string
	unseen                               int // calls naming its allocation id it is still unknown to (R47)
}

var allocationIDRE = regexp.MustCompile(`^eipalloc-([0-9a-f]{8}|[0-9a-f]{17})$`)

// allocateAddress allocates an Elastic IP address from Amazon's pool ("EC2 API Reference: AllocateAddress"),
// within the region's Elastic IP quota ("Elastic IP addresses", Elastic IP address quota: 5 per Region by
// default; beyond, AddressLimitExceeded).
func (s *Server) allocateAddress(rg *region, f form) (any, *apiError) {
	switch d := f.str("Domain"); d {
	case "", "vpc":
	default:
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter domain is invalid. Only 'vpc' is supported.", d)
	}
	for _, p := range []string{"Address", "IpamPoolId", "CustomerOwnedIpv4Pool"} {
		if f.has(p) {
			return nil, notModelled("AllocateAddress " + p)
		}
	}
	if pool := f.str("PublicIpv4Pool"); pool != "" && pool != "amazon" {
		return nil, notModelled("AllocateAddress from the pool " + pool)
	}
	if nbg := f.str("NetworkBorderGroup"); nbg != "" && nbg != rg.name {
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter NetworkBorderGroup is invalid.", nbg)
	}
	tags, e := tagsFor(f, "elastic-ip")
	if e != nil {
		return nil, e
	}
	if len(rg.addresses) >= s.opts.MaxElasticIPs {
		return nil, ec2Err("AddressLimitExceeded", "The maximum number of addresses has been reached.")
	}
	a := &Address{AllocationID: s.nextID("eipalloc"), PublicIP: s.publicIP(), Domain: "vpc", Tags: tags, unseen: s.timing.UnseenAddressCalls}
	rg.addresses[a.AllocationID] = a
	return &allocateXML{PublicIP: a.PublicIP, AllocationID: a.AllocationID, Domain: "vpc", BorderGroup: rg.name, Pool: "amazon"}, nil
}

// address resolves AllocationId, or PublicIp.
func (rg *region) address(f form) (*Address, *apiError) {
	if id := f.str("AllocationId"); id != "" {
		if !allocationIDRE.MatchString(id) {
			return nil, ec2Err("InvalidAllocationID.Malformed", "Invalid id: %q (expecting \"eipalloc-...\")", id)
		}
		if a := rg.addresses[id]; a != nil && a.unseen == 0 {
			return a, nil
		} else if a != nil {
			// Allocated, but its id has not reached this part of EC2 yet (R47).
			a.unseen--
		}
		return nil, ec2Err("InvalidAllocationID.NotFound", "The allocation ID '%s' does not exist", id)
	}
	if ip := f.str("PublicIp"); ip != "" {
		for _, id := range sortedKeys(rg.addresses) {
			if a := rg.addresses[id]; a.PublicIP == ip {
				return a, nil
			}
		}
		return nil, ec2Err("InvalidAddress.NotFound", "Address '%s' not found.", ip)
	}
	return nil, ec2Err("MissingParameter", "The request must contain the parameter AllocationId")
}

// associateAddress associates an address with an instance ("EC2 API Reference: AssociateAddress").
// Reassociation is automatic unless AllowReassociation is false; an instance that had another Elastic IP
// loses it. The instance must be past pending and not shutting down or terminated.
func (s *Server) associateAddress(rg *region, f form) (any, *apiError) {
	defer rg.seeOne()
	a, e := rg.address(f)
	if e != nil {
		return nil, e
	}
	if f.has("NetworkInterfaceId") {
		return nil, notModelled("AssociateAddress to a network interface")
	}
	id := f.str("InstanceId")
	if id == "" {
		return nil, ec2Err("MissingParameter", "The request must contain the parameter InstanceId or NetworkInterfaceId")
	}
	if e := checkInstanceIDs(rg, []string{id}); e != nil {
		return nil, e
	}
	in := rg.instances[id]
	switch in.State {
	case StatePending:
		return nil, ec2Err("IncorrectInstanceState", "The pending-instance-creation instance to which '%s' is attached is not in a valid state for this operation", eniOf(in))
	case StateShuttingDown, StateTerminated:
		return nil, ec2Err("IncorrectInstanceState", "The instance '%s' is not in a valid state for this operation.", id)
	}
	if ip := f.str("PrivateIpAddress"); ip != "" && ip != in.PrivateIP {
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter PrivateIpAddress is invalid. The address is not assigned to the instance's network interface.", ip)
	}
	allow, hasAllow, e := f.boolean("AllowReassociation")
	if e != nil {
		return nil, e
	}
	if a.InstanceID == id {
		return &associateXML{Return: true, AssociationID: a.AssociationID}, nil
	}
	if a.InstanceID != "" {
		if hasAllow && !allow {
			return nil, ec2Err("Resource.AlreadyAssociated", "resource %s is already associated with associate-id %s", a.AllocationID, a.AssociationID)
		}
		rg.disassociate(a)
	}
	for _, other := range rg.addresses {
		if other.InstanceID == id {
			rg.disassociate(other)
		}
	}
	a.InstanceID, a.PrivateIP, a.AssociationID = id, in.PrivateIP, s.nextID("eipassoc")
	rg.associations[a.AssociationID] = a.AllocationID
	in.PublicIP = a.PublicIP
	return &associateXML{Return: true, AssociationID: a.AssociationID}, nil
}

func eniOf(in *instance) string { return "eni-" + strings.TrimPrefix(in.ID, "i-") }

// disassociate ends an address's association; its instance gets back the address it had at launch.
func (rg *region) disassociate(a *Address) {
	if in := rg.instances[a.InstanceID]; in != nil && in.State != StateTerminated {
		in.PublicIP = in.launchIP
	}
	a.InstanceID, a.AssociationID, a.PrivateIP = "", "", ""
}

// disassociateAddress ends an association ("EC2 API Reference: DisassociateAddress"): idempotent, so an
// association that already ended is no error; one that never was is InvalidAssociationID.NotFound.
func (s *Server) disassociateAddress(rg *region, f form) (any, *apiError) {
	if id := f.str("AssociationId"); id != "" {
		alloc, known := rg.associations[id]
		if !known {
			return nil, ec2Err("InvalidAssociationID.NotFound", "The association ID '%s' does not exist", id)
		}
		if a := rg.addresses[alloc]; a != nil && a.AssociationID == id {
			rg.disassociate(a)
		}
		return &returnXML{Return: true}, nil
	}
	if f.str("PublicIp") == "" {
		return nil, ec2Err("MissingParameter", "The request must contain the parameter AssociationId")
	}
	a, e := rg.address(f)
	if e != nil {
		return nil, e
	}
	rg.disassociate(a)
	return &returnXML{Return: true}, nil
}

// releaseAddress releases an address ("EC2 API Reference: ReleaseAddress"): in a VPC it must be
// disassociated first, else InvalidIPAddress.InUse.
func (s *Server) releaseAddress(rg *region, f form) (any, *apiError) {
	a, e := rg.address(f)
	if e != nil {
		return nil, e
	}
	if nbg := f.str("NetworkBorderGroup"); nbg != "" && nbg != rg.name {
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter NetworkBorderGroup is invalid.", nbg)
	}
	if a.InstanceID != "" {
		return nil, ec2Err("InvalidIPAddress.InUse", "Address %s is in use by %s (association %s).", a.PublicIP, a.InstanceID, a.AssociationID)
	}
	delete(rg.addresses, a.AllocationID)
	return &returnXML{Return: true}, nil
}

var addressFilters = map[string]bool{
	"allocation-id": true, "association-id": true, "domain": true, "instance-id": true, "public-ip": true,
	"private-ip-address": true, "network-border-group": true, "network-interface-id": true,
}

func (a *Address) fields(rg *region) filterFields {
	return func(name string) []string {
		switch name {
		case "allocation-id":
			return []string{a.AllocationID}
		case "association-id":
			return []string{a.AssociationID}
		case "domain":
			return []string{a.Domain}
		case "instance-id":
			return []string{a.InstanceID}
		case "public-ip":
			return []string{a.PublicIP}
		case "private-ip-address":
			return []string{a.PrivateIP}
		case "network-border-group":
			return []string{rg.name}
		case "network-interface-id":
			if in := rg.instances[a.InstanceID]; in != nil {
				return []string{eniOf(in)}
			}
		}
		return nil
	}
}

// describeAddresses lists addresses ("EC2 API Reference: DescribeAddresses"), by allocation id, public IP
// or filter; it has no pagination.
func (s *Server) describeAddresses(rg *region, f form) (any, *apiError) {
	want := map[string]bool{}
	for _, id := range f.list("AllocationId") {
		a, e := rg.address(form{map[string][]string{"AllocationId": {id}}})
		if e != nil {
			return nil, e
		}
		want[a.AllocationID] = true
	}
	for _, ip := range f.list("PublicIp") {
		a, e := rg.address(form{map[string][]string{"PublicIp": {ip}}})
		if e != nil {
			return nil, e
		}
		want[a.AllocationID] = true
	}
	filters, e := f.filters(addressFilters)
	if e != nil {
		return nil, e
	}
	out := &describeAddressesXML{}
	for _, id := range sortedKeys(rg.addresses) {
		a := rg.addresses[id]
		if (len(want) == 0 || want[id]) && matches(filters, a.fields(rg), a.Tags) {
			x := addressXML{
				PublicIP: a.PublicIP, AllocationID: a.AllocationID, Domain: a.Domain, InstanceID: a.InstanceID,
				AssociationID: a.AssociationID, PrivateIP: a.PrivateIP, BorderGroup: rg.name, Pool: "amazon", Tags: tagSet(a.Tags),
			}
			if in := rg.instances[a.InstanceID]; in != nil {
				x.NetworkInterfaceID, x.NetworkInterfaceOwner = eniOf(in), s.opts.AccountID
			}
			out.Addresses.Items = append(out.Addresses.Items, x)
		}
	}
	return out, nil
}

// Addresses lists a region's Elastic IP addresses, sorted by allocation id.
func (s *Server) Addresses(region string) []Address {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceAll()
	rg := s.mustRegion(region)
	var out []Address
	for _, id := range sortedKeys(rg.addresses) {
		a := *rg.addresses[id]
		a.Tags = copyTags(a.Tags)
		out = append(out, a)
	}
	return out
}

type allocateXML struct {
	meta
	PublicIP     string `xml:"publicIp"`
	AllocationID string `xml:"allocationId"`
	Domain       string `xml:"domain"`
	BorderGroup  string `xml:"networkBorderGroup"`
	Pool         string `xml:"publicIpv4Pool"`
}

type associateXML struct {
	meta
	Return        bool   `xml:"return"`
	AssociationID string `xml:"associationId"`
}

type addressXML struct {
	PublicIP              string       `xml:"publicIp"`
	AllocationID          string       `xml:"allocationId"`
	Domain                string       `xml:"domain"`
	InstanceID            string       `xml:"instanceId,omitempty"`
	AssociationID         string       `xml:"associationId,omitempty"`
	NetworkInterfaceID    string       `xml:"networkInterfaceId,omitempty"`
	NetworkInterfaceOwner string       `xml:"networkInterfaceOwnerId,omitempty"`
	PrivateIP             string       `xml:"privateIpAddress,omitempty"`
	Tags                  *set[tagXML] `xml:"tagSet,omitempty"`
	Pool                  string       `xml:"publicIpv4Pool"`
	BorderGroup           string       `xml:"networkBorderGroup"`
}

type describeAddressesXML struct {
	meta
	Addresses set[addressXML] `xml:"addressesSet"`
}
