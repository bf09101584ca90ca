package ec2fake

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Instance states and their codes ("EC2 API Reference: InstanceState": the low byte of code is the state:
// 0 pending, 16 running, 32 shutting-down, 48 terminated, 64 stopping, 80 stopped).
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
)

var stateCodes = map[string]int{StatePending: 0, StateRunning: 16, StateShuttingDown: 32, StateTerminated: 48, StateStopping: 64, StateStopped: 80}

// Instance is an instance as the fake holds it.
type Instance struct {
	ID, ReservationID, ClientToken      string
	ImageID, InstanceType, Architecture string
	State                               string
	SubnetID, VPCID, AvailabilityZone   string
	PrivateIP                           string
	// PublicIP is the address the instance is reached at: its Elastic IP's while one is associated, else
	// the one it got at launch in a subnet that maps public addresses.
	PublicIP         string
	SecurityGroupIDs []string
	Tags             map[string]string
	Metadata         MetadataOptions
	// IAMInstanceProfile is the profile as the request named it (an ARN or a name).
	IAMInstanceProfile string
	KeyName            string
	// UserData is the base64 text the request carried.
	UserData   string
	Spot       bool
	VolumeID   string
	LaunchTime time.Time
}

// MetadataOptions are an instance's metadata service options as recorded at launch.
type MetadataOptions struct {
	HTTPTokens, HTTPEndpoint, InstanceMetadataTags string
	HopLimit                                       int
}

type instance struct {
	Instance
	since      time.Time // when it entered State, on the fake's clock
	sincePolls int       // the region's DescribeInstances count then
	stuck      bool
	unseen     int // calls it is still unknown to (Timing.UnseenPolls)
	gone       bool
	launchIP   string // the public address it got at launch
}

// launch is what a client token made: the request it came with and the reservation it answers.
type launch struct {
	params        string
	reservationID string
}

var (
	instanceIDRE = regexp.MustCompile(`^i-([0-9a-f]{8}|[0-9a-f]{17})$`)
	amiIDRE      = regexp.MustCompile(`^ami-([0-9a-f]{8}|[0-9a-f]{17})$`)
	typeRE       = regexp.MustCompile(`^([a-z][a-z0-9-]*)\.([0-9]*[a-z]+)$`)
)

// vcpus is the vCPU count the vCPU quotas charge an instance type: 2 up to large, 4 per xlarge, as the
// general-purpose families have ("Amazon EC2 instance types": instance type specifications). A type the
// pattern does not know is refused at launch.
func vcpus(instanceType string) int {
	m := typeRE.FindStringSubmatch(instanceType)
	if m == nil {
		return 0
	}
	size := m[2]
	switch size {
	case "nano", "micro", "small", "medium", "large":
		return 2
	case "xlarge":
		return 4
	case "metal":
		return 96
	}
	if n, err := strconv.Atoi(strings.TrimSuffix(size, "xlarge")); err == nil && strings.HasSuffix(size, "xlarge") {
		return 4 * n
	}
	return 0
}

// cpuOptionsOf is how an instance type's vCPUs are described (DescribeInstances' CpuOptions, "CPU options
// for Amazon EC2 instances"): Graviton cores run one thread each, the x86_64 types two; vCPUs are
// CoreCount * ThreadsPerCore.
func cpuOptionsOf(instanceType string) cpuOptionsXML {
	n := vcpus(instanceType)
	if archOf(instanceType) == "arm64" {
		return cpuOptionsXML{CoreCount: n, ThreadsPerCore: 1}
	}
	return cpuOptionsXML{CoreCount: max(n/2, 1), ThreadsPerCore: 2}
}

// standardFamily reports whether an instance type is of the Standard families (A, C, D, H, I, M, R, T, Z),
// the ones the Standard vCPU quotas (L-1216C47A On-Demand, L-34B43A08 Spot) count; Inf, DL, HPC, Trn and Mac
// begin with those letters and have quotas of their own ("Amazon EC2 service quotas": On-Demand Instance
// quotas). The fake models no quota of the other families.
func standardFamily(instanceType string) bool {
	family, _, _ := strings.Cut(instanceType, ".")
	for _, other := range []string{"inf", "dl", "hpc", "trn", "mac"} {
		if strings.HasPrefix(family, other) {
			return false
		}
	}
	return family != "" && strings.ContainsRune("acdhimrtz", rune(family[0]))
}

// archOf is an instance type's architecture: Graviton families carry a 'g' after their generation digit
// (t4g, m6g, c7gn, r8gd) and a1 is arm64; the rest are x86_64.
func archOf(instanceType string) string {
	family, _, _ := strings.Cut(instanceType, ".")
	if family == "a1" {
		return "arm64"
	}
	i := strings.IndexAny(family, "0123456789")
	if i < 0 {
		return "x86_64"
	}
	rest := strings.TrimLeft(family[i:], "0123456789")
	attrs, _, _ := strings.Cut(rest, "-")
	if strings.Contains(attrs, "g") {
		return "arm64"
	}
	return "x86_64"
}

// canLeave reports whether an instance's transitional state has lasted long enough (Timing).
func (s *Server) canLeave(rg *region, in *instance) bool {
	elapsed, polls := s.now().Sub(in.since), rg.describes-in.sincePolls
	switch in.State {
	case StatePending:
		return !in.stuck && polls >= s.timing.PendingPolls && elapsed >= s.timing.PendingFor
	case StateShuttingDown:
		return polls >= s.timing.ShuttingDownPolls && elapsed >= s.timing.ShuttingDownFor
	case StateTerminated:
		return !in.gone && polls >= s.timing.TerminatedVisiblePolls && elapsed >= s.timing.TerminatedVisibleFor
	}
	return false
}

// transition moves an instance to its next state. The caller holds s.mu.
func (s *Server) transition(rg *region, in *instance) {
	switch in.State {
	case StatePending:
		s.setState(rg, in, StateRunning)
	case StateShuttingDown:
		s.setState(rg, in, StateTerminated)
		// A terminated instance's Elastic IP is disassociated, its root volume deleted (DeleteOnTermination),
		// its addresses released.
		for _, a := range rg.addresses {
			if a.InstanceID == in.ID {
				a.InstanceID, a.AssociationID, a.PrivateIP = "", "", ""
			}
		}
		delete(rg.volumes, in.VolumeID)
		in.PublicIP, in.PrivateIP = "", ""
	case StateTerminated:
		in.gone = true
	}
}

func (s *Server) setState(rg *region, in *instance, state string) {
	in.State, in.since, in.sincePolls = state, s.now(), rg.describes
}

// advanceAll moves every instance along as far as its timing allows. The caller holds s.mu.
func (s *Server) advanceAll() {
	for _, rg := range s.regions {
		for _, id := range sortedKeys(rg.instances) {
			in := rg.instances[id]
			for s.canLeave(rg, in) {
				s.transition(rg, in)
			}
		}
	}
}

// visible is the instance id names, unless it is unknown to the caller: never launched, vanished after its
// termination, or not yet seen (Timing.UnseenPolls).
func (rg *region) visible(id string) *instance {
	in := rg.instances[id]
	if in == nil || in.gone || in.unseen > 0 {
		return nil
	}
	return in
}

// seeOne counts a call against every instance not yet seen. The caller holds s.mu.
func (rg *region) seeOne() {
	for _, in := range rg.instances {
		if in.unseen > 0 {
			in.unseen--
		}
	}
}

// checkInstanceIDs refuses malformed ids (InvalidInstanceID.Malformed) and unknown ones
// (InvalidInstanceID.NotFound, naming them all), as "EC2 API Reference: Error codes" describes both.
func checkInstanceIDs(rg *region, ids []string) *apiError {
	var missing []string
	for _, id := range ids {
		if !instanceIDRE.MatchString(id) {
			return ec2Err("InvalidInstanceID.Malformed", "Invalid id: %q", id)
		}
		if rg.visible(id) == nil {
			missing = append(missing, id)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return ec2Err("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", missing[0])
	}
	return ec2Err("InvalidInstanceID.NotFound", "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
}

// runInstances launches instances ("EC2 API Reference: RunInstances").
func (s *Server) runInstances(rg *region, f form) (any, *apiError) {
	token := f.str("ClientToken")
	if len(token) > 64 || !isASCII(token) {
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter clientToken is invalid. The client token must be a string of at most 64 ASCII characters.", token)
	}
	params := f.canonical("ClientToken")
	if token != "" {
		if l, ok := rg.launches[token]; ok {
			// "Ensuring idempotency in Amazon EC2 API requests": the same token with the same parameters
			// answers the same reservation; with different ones, IdempotentParameterMismatch.
			if l.params != params {
				return nil, ec2Err("IdempotentParameterMismatch", "The client token %s has already been used with a different request.", token)
			}
			// Since January 2025 a token whose instances are all terminated is refused, not answered with
			// the old reservation (R6).
			terminated := true
			for _, id := range rg.reservations[l.reservationID] {
				if in := rg.instances[id]; in != nil && !in.gone && in.State != StateTerminated {
					terminated = false
				}
			}
			if terminated {
				return nil, ec2Err("IdempotentInstanceTerminated",
					"The request to launch an instance uses the same client token as a previous request for which the instance has been terminated.")
			}
			return s.reservationXML(rg, l.reservationID), nil
		}
	}
	minCount, hasMin, e := f.integer("MinCount")
	if e != nil {
		return nil, e
	}
	maxCount, hasMax, e := f.integer("MaxCount")
	if e != nil {
		return nil, e
	}
	switch {
	case !hasMin:
		return nil, ec2Err("MissingParameter", "The request must contain the parameter MinCount")
	case !hasMax:
		return nil, ec2Err("MissingParameter", "The request must contain the parameter MaxCount")
	case minCount < 1:
		return nil, ec2Err("InvalidParameterValue", "Value (%d) for parameter minCount is invalid. Expecting a value greater than 0.", minCount)
	case maxCount < 1:
		return nil, ec2Err("InvalidParameterValue", "Value (%d) for parameter maxCount is invalid. Expecting a value greater than 0.", maxCount)
	case minCount > maxCount:
		return nil, ec2Err("InvalidParameterValue", "Value (%d) for parameter minCount is invalid. minCount must be less than or equal to maxCount (%d).", minCount, maxCount)
	}
	for _, p := range []string{"LaunchTemplate", "NetworkInterface", "SecondaryInterface", "Ipv6Address", "Ipv6AddressCount", "EnablePrimaryIpv6", "PrivateIpAddress", "CpuOptions"} {
		if f.anyUnder(p) {
			return nil, notModelled("RunInstances " + p)
		}
	}
	img, e := imageOf(rg, f.str("ImageId"))
	if e != nil {
		return nil, e
	}
	itype := f.str("InstanceType")
	if itype == "" {
		itype = "m1.small" // earlier editions of RunInstances, InstanceType: "Default: m1.small"
	}
	perVCPU := vcpus(itype)
	if perVCPU == 0 {
		return nil, ec2Err("InvalidParameterValue", "Invalid value '%s' for InstanceType.", itype)
	}
	if arch := archOf(itype); arch != img.Architecture {
		return nil, ec2Err("InvalidParameterValue", "The architecture '%s' of the specified instance type does not match the architecture '%s' of the specified AMI. Specify an instance type and an AMI that have matching architectures, and try again. You can use 'describe-instance-types' or 'describe-images' to discover the architecture of the instance type or AMI.", arch, img.Architecture)
	}
	sn, e := launchSubnet(rg, f.str("SubnetId"))
	if e != nil {
		return nil, e
	}
	groups, e := launchGroups(rg, sn, f.list("SecurityGroupId"), f.list("SecurityGroup"))
	if e != nil {
		return nil, e
	}
	md, e := metadataOptions(f, img)
	if e != nil {
		return nil, e
	}
	specs := f.tagSpecs()
	instanceTags, volumeTags, e := launchTags(specs)
	if e != nil {
		return nil, e
	}
	spot := false
	switch mt := f.str("InstanceMarketOptions.MarketType"); mt {
	case "", "capacity-block":
	case "spot":
		spot = true
	default:
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter InstanceMarketOptions.MarketType is invalid.", mt)
	}
	profile := f.str("IamInstanceProfile.Arn")
	if profile == "" {
		profile = f.str("IamInstanceProfile.Name")
	}
	if e := s.profileSeen(f); e != nil {
		return nil, e
	}

	n, e := s.launchCount(rg, minCount, maxCount, itype, spot)
	if e != nil {
		return nil, e
	}
	resID := s.nextID("r")
	stuck := s.stickNext > 0
	if stuck {
		s.stickNext--
	}
	for range n {
		in := &instance{Instance: Instance{
			ID: s.nextID("i"), ReservationID: resID, ClientToken: token, ImageID: img.ID, InstanceType: itype,
			Architecture: img.Architecture, SubnetID: sn.ID, VPCID: sn.VPCID, AvailabilityZone: sn.AvailabilityZone,
			PrivateIP: rg.privateIP(sn), SecurityGroupIDs: groups, Tags: copyTags(instanceTags), Metadata: md,
			IAMInstanceProfile: profile, KeyName: f.str("KeyName"), UserData: f.str("UserData"), Spot: spot,
			LaunchTime: s.now(),
		}, stuck: stuck, unseen: s.timing.UnseenPolls}
		if sn.MapPublicIPOnLaunch {
			in.launchIP = s.publicIP()
			in.PublicIP = in.launchIP
		}
		vol := &Volume{ID: s.nextID("vol"), InstanceID: in.ID, Tags: copyTags(volumeTags)}
		rg.volumes[vol.ID] = vol
		in.VolumeID = vol.ID
		s.setState(rg, in, StatePending)
		rg.instances[in.ID] = in
		rg.reservations[resID] = append(rg.reservations[resID], in.ID)
	}
	if token != "" {
		rg.launches[token] = &launch{params: params, reservationID: resID}
	}
	return s.reservationXML(rg, resID), nil
}

// launchCount is how many instances of itype (Spot or On-Demand) a launch of [minCount, maxCount] gets under
// the instance limit and the vCPU quota of its kind: RunInstances, MaxCount: "Amazon EC2 launches the largest
// possible number of instances above the specified minimum count"; below MinCount it fails with
// InstanceLimitExceeded, VcpuLimitExceeded (On-Demand) or MaxSpotInstanceCountExceeded (Spot).
func (s *Server) launchCount(rg *region, minCount, maxCount int, itype string, spot bool) (int, *apiError) {
	usedInstances, usedVCPUs := 0, 0
	for _, in := range rg.instances {
		if in.State != StateTerminated && in.State != StateStopped {
			usedInstances++
			if in.Spot == spot && standardFamily(in.InstanceType) {
				usedVCPUs += vcpus(in.InstanceType)
			}
		}
	}
	n := min(maxCount, s.opts.MaxInstances-usedInstances)
	if n < minCount {
		return 0, ec2Err("InstanceLimitExceeded", "You have requested more instances (%d) than your current instance limit of %d allows for the specified instance type. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", usedInstances+minCount, s.opts.MaxInstances)
	}
	if !standardFamily(itype) {
		return n, nil
	}
	quota := s.opts.MaxVCPUs
	if spot {
		quota = s.opts.MaxSpotVCPUs
	}
	n = min(n, max(quota-usedVCPUs, 0)/vcpus(itype))
	switch {
	case n >= minCount:
		return n, nil
	case spot:
		return 0, ec2Err("MaxSpotInstanceCountExceeded", "Max spot instance count exceeded")
	}
	return 0, ec2Err("VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of %d allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", max(quota, 0))
}

func imageOf(rg *region, id string) (Image, *apiError) {
	switch {
	case id == "":
		return Image{}, ec2Err("MissingParameter", "The request must contain the parameter ImageId")
	case !amiIDRE.MatchString(id):
		return Image{}, ec2Err("InvalidAMIID.Malformed", "Invalid id: %q (expecting \"ami-...\")", id)
	}
	img, ok := rg.images[id]
	if !ok {
		return Image{}, ec2Err("InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
	}
	return img, nil
}

func launchSubnet(rg *region, id string) (*Subnet, *apiError) {
	if id == "" {
		sn := rg.defaultSubnet()
		if sn == nil {
			return nil, ec2Err("VPCIdNotSpecified", "No default VPC for this user. GroupName is only supported for EC2-Classic and default VPC.")
		}
		return sn, nil
	}
	sn := rg.subnets[id]
	if sn == nil {
		return nil, ec2Err("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
	}
	return sn, nil
}

// launchGroups resolves the launch's security groups, which must be in the subnet's VPC ("EC2 API
// Reference: Error codes", InvalidParameter: "you can't specify a security group and subnet that are in
// different VPCs"); none given is the VPC's default group.
func launchGroups(rg *region, sn *Subnet, ids, names []string) ([]string, *apiError) {
	var out []string
	for _, id := range ids {
		g, e := rg.groupByID(id)
		if e != nil {
			return nil, e
		}
		if g.VPCID != sn.VPCID {
			return nil, ec2Err("InvalidParameter", "Security group %s and subnet %s belong to different networks.", id, sn.ID)
		}
		out = append(out, id)
	}
	for _, name := range names {
		g := rg.groupByName(sn.VPCID, name)
		if g == nil {
			return nil, ec2Err("InvalidGroup.NotFound", "The security group '%s' does not exist in VPC '%s'", name, sn.VPCID)
		}
		out = append(out, g.ID)
	}
	if len(out) == 0 {
		out = append(out, rg.groupByName(sn.VPCID, "default").ID)
	}
	return out, nil
}

// metadataOptions reads MetadataOptions ("EC2 API Reference: InstanceMetadataOptionsRequest"): HttpTokens
// optional or required (default required for an AMI with ImdsSupport v2.0, else optional), a hop limit of 1
// to 64 (default 1), the endpoint and instance tags in metadata enabled or disabled.
func metadataOptions(f form, img Image) (MetadataOptions, *apiError) {
	md := MetadataOptions{HTTPTokens: "optional", HTTPEndpoint: "enabled", InstanceMetadataTags: "disabled", HopLimit: 1}
	if img.IMDSv2Only {
		md.HTTPTokens = "required"
	}
	for param, dst := range map[string]*string{"HttpTokens": &md.HTTPTokens, "HttpEndpoint": &md.HTTPEndpoint, "InstanceMetadataTags": &md.InstanceMetadataTags} {
		v := f.str("MetadataOptions." + param)
		if v == "" {
			continue
		}
		allowed := map[string]bool{"enabled": true, "disabled": true}
		if param == "HttpTokens" {
			allowed = map[string]bool{"optional": true, "required": true}
		}
		if !allowed[v] {
			return md, ec2Err("InvalidParameterValue", "Value (%s) for parameter MetadataOptions.%s is invalid.", v, param)
		}
		*dst = v
	}
	hop, has, e := f.integer("MetadataOptions.HttpPutResponseHopLimit")
	if e != nil {
		return md, e
	}
	if has {
		if hop < 1 || hop > 64 {
			return md, ec2Err("InvalidParameterValue", "Value (%d) for parameter HttpPutResponseHopLimit is invalid. Expecting a value between 1 and 64.", hop)
		}
		md.HopLimit = hop
	}
	return md, nil
}

// launchTags reads RunInstances' TagSpecifications: instance and volume tags apply; the network
// interface's and the Spot request's are checked and kept nowhere; other types cannot be tagged at launch.
func launchTags(specs []tagSpec) (instanceTags, volumeTags map[string]string, e *apiError) {
	for _, spec := range specs {
		tags, e := specTags(spec)
		if e != nil {
			return nil, nil, e
		}
		switch spec.ResourceType {
		case "instance":
			instanceTags = mergeTags(instanceTags, tags)
		case "volume":
			volumeTags = mergeTags(volumeTags, tags)
		case "network-interface", "spot-instances-request":
		default:
			return nil, nil, invalidTaggable(spec.ResourceType)
		}
	}
	return instanceTags, volumeTags, nil
}

// describeInstances lists instances ("EC2 API Reference: DescribeInstances").
func (s *Server) describeInstances(rg *region, f form) (any, *apiError) {
	defer func() { rg.describes++ }()
	defer rg.seeOne()
	ids := f.list("InstanceId")
	if len(ids) > 0 && f.has("MaxResults") {
		return nil, ec2Err("InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
	}
	if e := checkInstanceIDs(rg, ids); e != nil {
		return nil, e
	}
	filters, e := f.filters(instanceFilters)
	if e != nil {
		return nil, e
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var list []*instance
	for _, in := range rg.instances {
		if in.gone || in.unseen > 0 || (len(ids) > 0 && !want[in.ID]) {
			continue
		}
		if matches(filters, in.fields(rg), in.Tags) {
			list = append(list, in)
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if !list[i].LaunchTime.Equal(list[j].LaunchTime) {
			return list[i].LaunchTime.Before(list[j].LaunchTime)
		}
		return list[i].ID < list[j].ID
	})
	page, next, e := paginate(f, "DescribeInstances", list, 5, 1000)
	if e != nil {
		return nil, e
	}
	out := &describeInstancesXML{NextToken: next}
	for _, in := range page {
		n := len(out.Reservations.Items)
		if n == 0 || out.Reservations.Items[n-1].ReservationID != in.ReservationID {
			out.Reservations.Items = append(out.Reservations.Items, s.reservationHead(in.ReservationID))
			n++
		}
		r := &out.Reservations.Items[n-1]
		r.Instances.Items = append(r.Instances.Items, s.instanceXML(rg, in))
	}
	return out, nil
}

var instanceFilters = map[string]bool{
	"instance-id": true, "instance-state-name": true, "instance-state-code": true, "instance-type": true, "image-id": true,
	"subnet-id": true, "vpc-id": true, "client-token": true, "reservation-id": true, "availability-zone": true,
	"instance.group-id": true, "instance.group-name": true, "group-id": true, "group-name": true, "ip-address": true,
	"private-ip-address": true, "iam-instance-profile.arn": true, "key-name": true, "architecture": true,
	"instance-lifecycle": true, "metadata-options.http-tokens": true,
}

func (in *instance) fields(rg *region) filterFields {
	return func(name string) []string {
		switch name {
		case "instance-id":
			return []string{in.ID}
		case "instance-state-name":
			return []string{in.State}
		case "instance-state-code":
			return []string{strconv.Itoa(stateCodes[in.State])}
		case "instance-type":
			return []string{in.InstanceType}
		case "image-id":
			return []string{in.ImageID}
		case "subnet-id":
			return []string{in.SubnetID}
		case "vpc-id":
			return []string{in.VPCID}
		case "client-token":
			return []string{in.ClientToken}
		case "reservation-id":
			return []string{in.ReservationID}
		case "availability-zone":
			return []string{in.AvailabilityZone}
		case "instance.group-id", "group-id":
			return in.SecurityGroupIDs
		case "instance.group-name", "group-name":
			var names []string
			for _, id := range in.SecurityGroupIDs {
				if g := rg.groups[id]; g != nil {
					names = append(names, g.Name)
				}
			}
			return names
		case "ip-address":
			return []string{in.PublicIP}
		case "private-ip-address":
			return []string{in.PrivateIP}
		case "iam-instance-profile.arn":
			return []string{in.IAMInstanceProfile}
		case "key-name":
			return []string{in.KeyName}
		case "architecture":
			return []string{in.Architecture}
		case "instance-lifecycle":
			if in.Spot {
				return []string{"spot"}
			}
		case "metadata-options.http-tokens":
			return []string{in.Metadata.HTTPTokens}
		}
		return nil
	}
}

// terminateInstances terminates instances ("EC2 API Reference: TerminateInstances"): idempotent; one
// unknown id fails the request and terminates none.
func (s *Server) terminateInstances(rg *region, f form) (any, *apiError) {
	defer rg.seeOne()
	ids := f.list("InstanceId")
	if len(ids) == 0 {
		return nil, ec2Err("MissingParameter", "The request must contain the parameter InstanceId")
	}
	if e := checkInstanceIDs(rg, ids); e != nil {
		return nil, e
	}
	out := &terminateXML{}
	for _, id := range ids {
		in := rg.instances[id]
		prev := in.State
		if prev != StateShuttingDown && prev != StateTerminated {
			rg.cutDrains(id)
			s.setState(rg, in, StateShuttingDown)
		}
		out.Instances.Items = append(out.Instances.Items, stateChangeXML{
			InstanceID: id, Current: stateXML{stateCodes[in.State], in.State}, Previous: stateXML{stateCodes[prev], prev},
		})
	}
	return out, nil
}

// Instances lists a region's instances, vanished ones left out, sorted by launch time and id.
func (s *Server) Instances(region string) []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceAll()
	rg := s.mustRegion(region)
	var out []Instance
	for _, in := range rg.instances {
		if !in.gone {
			out = append(out, in.snapshot())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LaunchTime.Equal(out[j].LaunchTime) {
			return out[i].LaunchTime.Before(out[j].LaunchTime)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Instance returns an instance, or false when it never was or has vanished.
func (s *Server) Instance(region, id string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceAll()
	in := s.mustRegion(region).instances[id]
	if in == nil || in.gone {
		return Instance{}, false
	}
	return in.snapshot(), true
}

// SetInstanceState puts an instance in a state at once, as a user or AWS acting behind the backend's back
// would (stopped, stopping, or terminated by a Spot interruption).
func (s *Server) SetInstanceState(region, id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	in := rg.instances[id]
	if in == nil {
		s.t.Fatalf("ec2fake: no instance %s in %s", id, region)
		return
	}
	if _, ok := stateCodes[state]; !ok {
		s.t.Fatalf("ec2fake: no instance state %q", state)
	}
	if state == StateTerminated && in.State != StateTerminated {
		in.State = StateShuttingDown
		s.transition(rg, in)
		return
	}
	s.setState(rg, in, state)
}

// Volume returns a volume (an instance's root volume, until the instance is terminated).
func (s *Server) Volume(region, id string) (Volume, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceAll()
	v := s.mustRegion(region).volumes[id]
	if v == nil {
		return Volume{}, false
	}
	out := *v
	out.Tags = copyTags(v.Tags)
	return out, true
}

func (in *instance) snapshot() Instance {
	out := in.Instance
	out.Tags = copyTags(in.Tags)
	out.SecurityGroupIDs = append([]string(nil), in.SecurityGroupIDs...)
	return out
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] > 0x7f {
			return false
		}
	}
	return true
}
