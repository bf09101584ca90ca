package ec2fake

import (
	"math"
	"net/netip"
	"regexp"
	"strconv"
)

var subnetIDRE = regexp.MustCompile(`^subnet-([0-9a-f]{8}|[0-9a-f]{17})$`)

// describeSubnets lists subnets ("EC2 API Reference: DescribeSubnets"): by SubnetId (an unknown one is
// InvalidSubnetID.NotFound), by filter, in pages of 5 to 1000.
func (s *Server) describeSubnets(rg *region, f form) (any, *apiError) {
	want := map[string]bool{}
	for _, id := range f.list("SubnetId") {
		if !subnetIDRE.MatchString(id) {
			return nil, ec2Err("InvalidSubnetID.Malformed", "Invalid id: %q (expecting \"subnet-...\")", id)
		}
		if rg.subnets[id] == nil {
			return nil, ec2Err("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
		}
		want[id] = true
	}
	filters, e := f.filters(subnetFilters)
	if e != nil {
		return nil, e
	}
	var list []*Subnet
	for _, id := range sortedKeys(rg.subnets) {
		sn := rg.subnets[id]
		if (len(want) == 0 || want[id]) && matches(filters, subnetFields(sn), sn.Tags) {
			list = append(list, sn)
		}
	}
	page, next, e := paginate(f, "DescribeSubnets", list, 5, 1000)
	if e != nil {
		return nil, e
	}
	out := &describeSubnetsXML{NextToken: next}
	for _, sn := range page {
		out.Subnets.Items = append(out.Subnets.Items, s.subnetXML(rg, sn))
	}
	return out, nil
}

var subnetFilters = map[string]bool{
	"subnet-id": true, "vpc-id": true, "availability-zone": true, "default-for-az": true, "state": true,
	"cidr-block": true, "cidr": true, "map-public-ip-on-launch": true, "owner-id": true,
}

func subnetFields(sn *Subnet) filterFields {
	return func(name string) []string {
		switch name {
		case "subnet-id":
			return []string{sn.ID}
		case "vpc-id":
			return []string{sn.VPCID}
		case "availability-zone":
			return []string{sn.AvailabilityZone}
		case "default-for-az":
			return []string{strconv.FormatBool(sn.DefaultForAZ)}
		case "state":
			return []string{"available"}
		case "cidr-block", "cidr":
			return []string{sn.CIDR}
		case "map-public-ip-on-launch":
			return []string{strconv.FormatBool(sn.MapPublicIPOnLaunch)}
		}
		return nil
	}
}

type subnetXML struct {
	SubnetID            string       `xml:"subnetId"`
	SubnetArn           string       `xml:"subnetArn"`
	State               string       `xml:"state"`
	OwnerID             string       `xml:"ownerId"`
	VpcID               string       `xml:"vpcId"`
	CidrBlock           string       `xml:"cidrBlock"`
	AvailableIPs        int          `xml:"availableIpAddressCount"`
	AvailabilityZone    string       `xml:"availabilityZone"`
	AvailabilityZoneID  string       `xml:"availabilityZoneId"`
	DefaultForAz        bool         `xml:"defaultForAz"`
	MapPublicIPOnLaunch bool         `xml:"mapPublicIpOnLaunch"`
	Tags                *set[tagXML] `xml:"tagSet,omitempty"`
}

type describeSubnetsXML struct {
	meta
	Subnets   set[subnetXML] `xml:"subnetSet"`
	NextToken string         `xml:"nextToken,omitempty"`
}

func (s *Server) subnetXML(rg *region, sn *Subnet) subnetXML {
	avail := 0
	if p, err := netip.ParsePrefix(sn.CIDR); err == nil {
		avail = int(math.Pow(2, float64(32-p.Bits()))) - 5
	}
	for _, in := range rg.instances {
		if in.SubnetID == sn.ID && in.State != StateTerminated {
			avail--
		}
	}
	zoneSuffix := sn.AvailabilityZone[len(sn.AvailabilityZone)-1:]
	return subnetXML{
		SubnetID: sn.ID, SubnetArn: "arn:aws:ec2:" + rg.name + ":" + s.opts.AccountID + ":subnet/" + sn.ID, State: "available",
		OwnerID: s.opts.AccountID, VpcID: sn.VPCID, CidrBlock: sn.CIDR, AvailableIPs: avail, AvailabilityZone: sn.AvailabilityZone,
		AvailabilityZoneID: rg.name + "-az-" + zoneSuffix, DefaultForAz: sn.DefaultForAZ, MapPublicIPOnLaunch: sn.MapPublicIPOnLaunch,
		Tags: tagSet(sn.Tags),
	}
}
