package ec2fake

import (
	"fmt"
	"net/netip"
	"sort"
)

// What each region holds before the first request: a default VPC (172.31.0.0/16, as AWS makes them) with a
// default subnet in each of three Availability Zones, each VPC's default security group, the Debian 12
// images of both architectures, and Debian's public SSM parameters naming them.

// VPC is a virtual private cloud.
type VPC struct {
	ID, CIDR string
	Default  bool
}

// Subnet is a subnet of a VPC.
type Subnet struct {
	ID, VPCID, CIDR, AvailabilityZone string
	DefaultForAZ, MapPublicIPOnLaunch bool
	Tags                              map[string]string
}

// Image is an AMI the region knows. Architecture is x86_64 or arm64; IMDSv2Only is ImdsSupport v2.0,
// which makes HttpTokens default to required.
type Image struct {
	ID, Name, Architecture string
	IMDSv2Only             bool
}

// Volume is an instance's root EBS volume.
type Volume struct {
	ID, InstanceID string
	Tags           map[string]string
}

// DebianParameter is the public parameter Debian publishes for the latest Debian 12 image of arch (amd64 or
// arm64).
func DebianParameter(arch string) string { return "/aws/service/debian/release/12/latest/" + arch }

// DebianAMI is the seeded Debian 12 image of arch (amd64 or arm64) in the region with that index in
// Options.Regions: the value of DebianParameter(arch) there.
func DebianAMI(regionIndex int, arch string) string {
	last := "a"
	if arch == "arm64" {
		last = "b"
	}
	return fmt.Sprintf("ami-0deb12%02x00000000%s", regionIndex, last)
}

func (s *Server) seedRegion(name string, index int) *region {
	rg := &region{
		name: name, instances: map[string]*instance{}, reservations: map[string][]string{}, launches: map[string]*launch{},
		volumes: map[string]*Volume{}, vpcs: map[string]*VPC{}, subnets: map[string]*Subnet{}, groups: map[string]*group{},
		addresses: map[string]*Address{}, associations: map[string]string{}, images: map[string]Image{}, params: map[string]*parameter{}, logGroups: map[string]*logGroup{},
	}
	vpc := &VPC{ID: s.nextID("vpc"), CIDR: "172.31.0.0/16", Default: true}
	s.addVPC(rg, vpc)
	for i, az := range []string{"a", "b", "c"} {
		sn := &Subnet{
			ID: s.nextID("subnet"), VPCID: vpc.ID, CIDR: fmt.Sprintf("172.31.%d.0/20", 16*i), AvailabilityZone: name + az,
			DefaultForAZ: true, MapPublicIPOnLaunch: true,
		}
		rg.subnets[sn.ID] = sn
	}
	for _, arch := range []string{"amd64", "arm64"} {
		machine := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[arch]
		img := Image{ID: DebianAMI(index, arch), Name: "debian-12-" + arch + "-20300101-0000", Architecture: machine}
		rg.images[img.ID] = img
		rg.params[DebianParameter(arch)] = &parameter{Parameter: Parameter{
			Name: DebianParameter(arch), Type: "String", Tier: "Standard", DataType: "text", Value: img.ID, Version: 1,
			LastModified: s.now(),
		}, public: true}
	}
	for _, img := range s.opts.Images {
		rg.images[img.ID] = img
	}
	return rg
}

// addVPC adds a VPC with its default security group. The caller holds s.mu or is seeding.
func (s *Server) addVPC(rg *region, vpc *VPC) {
	rg.vpcs[vpc.ID] = vpc
	g := &group{SecurityGroup: SecurityGroup{
		ID: s.nextID("sg"), Name: "default", Description: "default VPC security group", VPCID: vpc.ID,
	}}
	g.Egress = []Rule{{ID: s.nextID("sgr"), Protocol: "-1", FromPort: -1, ToPort: -1, CIDR: "0.0.0.0/0"}}
	rg.groups[g.ID] = g
}

// SetSubnets replaces a region's subnets. A subnet without an ID gets one; a VPC a subnet names that the
// region does not have is made (not default, with its default security group, its CIDR the subnet's /16).
func (s *Server) SetSubnets(region string, subnets []Subnet) []Subnet {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	rg.subnets = map[string]*Subnet{}
	var out []Subnet
	for _, sn := range subnets {
		if sn.ID == "" {
			sn.ID = s.nextID("subnet")
		}
		if _, err := netip.ParsePrefix(sn.CIDR); err != nil {
			s.t.Fatalf("ec2fake: subnet %s: CIDR %q: %v", sn.ID, sn.CIDR, err)
		}
		if sn.VPCID == "" {
			s.t.Fatalf("ec2fake: subnet %s names no VPC", sn.ID)
		}
		if _, ok := rg.vpcs[sn.VPCID]; !ok {
			p := netip.MustParsePrefix(sn.CIDR)
			vpcCIDR, _ := p.Addr().Prefix(16)
			s.addVPC(rg, &VPC{ID: sn.VPCID, CIDR: vpcCIDR.String()})
		}
		if sn.AvailabilityZone == "" {
			sn.AvailabilityZone = region + "a"
		}
		sn.Tags = copyTags(sn.Tags)
		rg.subnets[sn.ID] = &sn
		out = append(out, sn)
	}
	return out
}

// Subnets lists a region's subnets, sorted by id.
func (s *Server) Subnets(region string) []Subnet {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	var out []Subnet
	for _, id := range sortedKeys(rg.subnets) {
		sn := *rg.subnets[id]
		sn.Tags = copyTags(sn.Tags)
		out = append(out, sn)
	}
	return out
}

// VPCs lists a region's VPCs, sorted by id.
func (s *Server) VPCs(region string) []VPC {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	var out []VPC
	for _, id := range sortedKeys(rg.vpcs) {
		out = append(out, *rg.vpcs[id])
	}
	return out
}

// NewerDebian is a Debian 12 amd64 image that is not seeded, newer than DebianAMI's: what a test that rolls a
// proxy onto another image adds (Options.Images, AddImage).
var NewerDebian = Image{ID: "ami-0deb1200000000b0a", Name: "debian-12-amd64-20300201-0000", Architecture: "x86_64"}

// AddImage makes an image known in a region.
func (s *Server) AddImage(region string, img Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustRegion(region).images[img.ID] = img
}

// defaultVPC is the region's default VPC, or nil.
func (rg *region) defaultVPC() *VPC {
	for _, id := range sortedKeys(rg.vpcs) {
		if rg.vpcs[id].Default {
			return rg.vpcs[id]
		}
	}
	return nil
}

// defaultSubnet is where an instance launched without a subnet goes: the default VPC's first default
// subnet by Availability Zone.
func (rg *region) defaultSubnet() *Subnet {
	vpc := rg.defaultVPC()
	if vpc == nil {
		return nil
	}
	var cands []*Subnet
	for _, sn := range rg.subnets {
		if sn.VPCID == vpc.ID && sn.DefaultForAZ {
			cands = append(cands, sn)
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].AvailabilityZone < cands[j].AvailabilityZone })
	if len(cands) == 0 {
		return nil
	}
	return cands[0]
}

// privateIP hands out the next address of a subnet (skipping the network address and the four AWS keeps).
func (rg *region) privateIP(sn *Subnet) string {
	rg.nextIP++
	p := netip.MustParsePrefix(sn.CIDR).Masked()
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += uint32(4 + rg.nextIP)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String()
}

// publicIP hands out a public address from the documentation ranges, unique within the server.
func (s *Server) publicIP() string {
	s.seq++
	return fmt.Sprintf("198.51.%d.%d", (s.seq/250)%256, s.seq%250+1)
}

func copyTags(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
