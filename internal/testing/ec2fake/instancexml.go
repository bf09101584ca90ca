package ec2fake

import "strings"

// The XML of instances and reservations: the element names the SDK's deserializer reads
// (awsEc2query_deserializeDocumentInstance, ...Reservation, ...InstanceStateChange).

type stateXML struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type groupIdentifierXML struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type ebsXML struct {
	VolumeID            string `xml:"volumeId"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type blockDeviceXML struct {
	DeviceName string `xml:"deviceName"`
	Ebs        ebsXML `xml:"ebs"`
}

type metadataOptionsXML struct {
	State                   string `xml:"state"`
	HTTPTokens              string `xml:"httpTokens"`
	HTTPPutResponseHopLimit int    `xml:"httpPutResponseHopLimit"`
	HTTPEndpoint            string `xml:"httpEndpoint"`
	HTTPProtocolIpv6        string `xml:"httpProtocolIpv6"`
	InstanceMetadataTags    string `xml:"instanceMetadataTags"`
}

type iamProfileXML struct {
	Arn string `xml:"arn"`
	ID  string `xml:"id"`
}

type cpuOptionsXML struct {
	CoreCount      int `xml:"coreCount"`
	ThreadsPerCore int `xml:"threadsPerCore"`
}

type placementXML struct {
	AvailabilityZone string `xml:"availabilityZone"`
	Tenancy          string `xml:"tenancy"`
}

type stateReasonXML struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type instanceXML struct {
	InstanceID      string                  `xml:"instanceId"`
	ImageID         string                  `xml:"imageId"`
	State           stateXML                `xml:"instanceState"`
	PrivateDNSName  string                  `xml:"privateDnsName"`
	DNSName         string                  `xml:"dnsName"`
	Reason          string                  `xml:"reason"`
	KeyName         string                  `xml:"keyName,omitempty"`
	AmiLaunchIndex  int                     `xml:"amiLaunchIndex"`
	InstanceType    string                  `xml:"instanceType"`
	LaunchTime      string                  `xml:"launchTime"`
	Placement       placementXML            `xml:"placement"`
	Monitoring      stateNameXML            `xml:"monitoring"`
	SubnetID        string                  `xml:"subnetId,omitempty"`
	VpcID           string                  `xml:"vpcId,omitempty"`
	PrivateIP       string                  `xml:"privateIpAddress,omitempty"`
	PublicIP        string                  `xml:"ipAddress,omitempty"`
	SourceDestCheck bool                    `xml:"sourceDestCheck"`
	Groups          set[groupIdentifierXML] `xml:"groupSet"`
	StateReason     *stateReasonXML         `xml:"stateReason,omitempty"`
	Architecture    string                  `xml:"architecture"`
	RootDeviceType  string                  `xml:"rootDeviceType"`
	RootDeviceName  string                  `xml:"rootDeviceName"`
	BlockDevices    set[blockDeviceXML]     `xml:"blockDeviceMapping"`
	Virtualization  string                  `xml:"virtualizationType"`
	ClientToken     string                  `xml:"clientToken"`
	Tags            *set[tagXML]            `xml:"tagSet,omitempty"`
	Hypervisor      string                  `xml:"hypervisor"`
	IamProfile      *iamProfileXML          `xml:"iamInstanceProfile,omitempty"`
	EbsOptimized    bool                    `xml:"ebsOptimized"`
	EnaSupport      bool                    `xml:"enaSupport"`
	CPUOptions      cpuOptionsXML           `xml:"cpuOptions"`
	Lifecycle       string                  `xml:"instanceLifecycle,omitempty"`
	MetadataOptions metadataOptionsXML      `xml:"metadataOptions"`
	PlatformDetails string                  `xml:"platformDetails"`
	UsageOperation  string                  `xml:"usageOperation"`
	CurrentBootMode string                  `xml:"currentInstanceBootMode"`
}

type stateNameXML struct {
	State string `xml:"state"`
}

type reservationXML struct {
	meta
	reservationItemXML
}

type reservationItemXML struct {
	ReservationID string                  `xml:"reservationId"`
	OwnerID       string                  `xml:"ownerId"`
	Groups        set[groupIdentifierXML] `xml:"groupSet"`
	Instances     set[instanceXML]        `xml:"instancesSet"`
}

type describeInstancesXML struct {
	meta
	Reservations set[reservationItemXML] `xml:"reservationSet"`
	NextToken    string                  `xml:"nextToken,omitempty"`
}

type stateChangeXML struct {
	InstanceID string   `xml:"instanceId"`
	Current    stateXML `xml:"currentState"`
	Previous   stateXML `xml:"previousState"`
}

type terminateXML struct {
	meta
	Instances set[stateChangeXML] `xml:"instancesSet"`
}

func (s *Server) reservationHead(id string) reservationItemXML {
	return reservationItemXML{ReservationID: id, OwnerID: s.opts.AccountID}
}

// reservationXML is RunInstances' answer for a reservation, its instances as they are now (a repeated
// idempotent request answers the same reservation; "the only information that might vary in the response is
// the state of the instance").
func (s *Server) reservationXML(rg *region, id string) *reservationXML {
	out := &reservationXML{reservationItemXML: s.reservationHead(id)}
	for i, iid := range rg.reservations[id] {
		x := s.instanceXML(rg, rg.instances[iid])
		x.AmiLaunchIndex = i
		out.Instances.Items = append(out.Instances.Items, x)
	}
	return out
}

func (s *Server) instanceXML(rg *region, in *instance) instanceXML {
	x := instanceXML{
		InstanceID: in.ID, ImageID: in.ImageID, State: stateXML{stateCodes[in.State], in.State},
		KeyName: in.KeyName, InstanceType: in.InstanceType, LaunchTime: in.LaunchTime.Format(timeFormat),
		Placement: placementXML{in.AvailabilityZone, "default"}, Monitoring: stateNameXML{"disabled"},
		SourceDestCheck: true, Architecture: in.Architecture, RootDeviceType: "ebs", RootDeviceName: "/dev/xvda",
		Virtualization: "hvm", ClientToken: in.ClientToken, Tags: tagSet(in.Tags), Hypervisor: "xen",
		EnaSupport: true, PlatformDetails: "Linux/UNIX", UsageOperation: "RunInstances", CurrentBootMode: "uefi",
		CPUOptions: cpuOptionsOf(in.InstanceType),
		MetadataOptions: metadataOptionsXML{
			State: "applied", HTTPTokens: in.Metadata.HTTPTokens, HTTPPutResponseHopLimit: in.Metadata.HopLimit,
			HTTPEndpoint: in.Metadata.HTTPEndpoint, HTTPProtocolIpv6: "disabled", InstanceMetadataTags: in.Metadata.InstanceMetadataTags,
		},
	}
	if in.Architecture == "x86_64" {
		x.CurrentBootMode = "legacy-bios"
	}
	if in.State == StatePending {
		x.MetadataOptions.State = "pending"
	}
	if in.State != StateTerminated {
		x.SubnetID, x.VpcID, x.PrivateIP, x.PublicIP = in.SubnetID, in.VPCID, in.PrivateIP, in.PublicIP
		if in.PrivateIP != "" {
			x.PrivateDNSName = "ip-" + strings.ReplaceAll(in.PrivateIP, ".", "-") + "." + rg.name + ".compute.internal"
		}
		if in.PublicIP != "" {
			x.DNSName = "ec2-" + strings.ReplaceAll(in.PublicIP, ".", "-") + "." + rg.name + ".compute.amazonaws.com"
		}
		for _, id := range in.SecurityGroupIDs {
			name := ""
			if g := rg.groups[id]; g != nil {
				name = g.Name
			}
			x.Groups.Items = append(x.Groups.Items, groupIdentifierXML{id, name})
		}
		if _, ok := rg.volumes[in.VolumeID]; ok {
			x.BlockDevices.Items = []blockDeviceXML{{DeviceName: "/dev/xvda", Ebs: ebsXML{
				VolumeID: in.VolumeID, Status: "attached", AttachTime: in.LaunchTime.Format(timeFormat), DeleteOnTermination: true,
			}}}
		}
	}
	switch in.State {
	case StatePending:
		x.StateReason = &stateReasonXML{"pending", "pending"}
	case StateShuttingDown, StateTerminated:
		x.StateReason = &stateReasonXML{"Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"}
		x.Reason = "User initiated"
	}
	if in.IAMInstanceProfile != "" {
		arn := in.IAMInstanceProfile
		if !strings.HasPrefix(arn, "arn:") {
			arn = "arn:aws:iam::" + s.opts.AccountID + ":instance-profile/" + arn
		}
		x.IamProfile = &iamProfileXML{Arn: arn, ID: "AIPAEC2FAKE" + strings.ToUpper(in.ID[2:12])}
	}
	if in.Spot {
		x.Lifecycle = "spot"
	}
	return x
}
