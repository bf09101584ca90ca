package ec2fake

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// The EC2 Query API's wire: a form-encoded POST (Action, Version and the action's parameters, lists as
// Name.N, members as Name.Member), answered with XML in the 2016-11-15 namespace; errors are
// <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response> ("EC2 API Reference:
// Error codes", Example error response).

const (
	ec2Version   = "2016-11-15"
	ec2Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"
)

// ec2Handler serves one action in one region. The caller holds s.mu. It returns the answer's body (a
// struct whose fields are the response elements) or the error to answer.
type ec2Handler func(s *Server, rg *region, f form) (any, *apiError)

// ec2Actions are the actions the fake serves; any other Action is InvalidAction.
var ec2Actions = map[string]ec2Handler{
	"RunInstances":                   (*Server).runInstances,
	"DescribeInstances":              (*Server).describeInstances,
	"TerminateInstances":             (*Server).terminateInstances,
	"CreateTags":                     (*Server).createTags,
	"DeleteTags":                     (*Server).deleteTags,
	"DescribeSubnets":                (*Server).describeSubnets,
	"CreateSecurityGroup":            (*Server).createSecurityGroup,
	"DescribeSecurityGroups":         (*Server).describeSecurityGroups,
	"AuthorizeSecurityGroupIngress":  (*Server).authorizeIngress,
	"RevokeSecurityGroupIngress":     (*Server).revokeIngress,
	"AuthorizeSecurityGroupEgress":   (*Server).authorizeEgress,
	"RevokeSecurityGroupEgress":      (*Server).revokeEgress,
	"DeleteSecurityGroup":            (*Server).deleteSecurityGroup,
	"AllocateAddress":                (*Server).allocateAddress,
	"AssociateAddress":               (*Server).associateAddress,
	"DisassociateAddress":            (*Server).disassociateAddress,
	"ReleaseAddress":                 (*Server).releaseAddress,
	"DescribeAddresses":              (*Server).describeAddresses,
	"DescribeAccountAttributes":      (*Server).describeAccountAttributes,
	"CreateReplaceRootVolumeTask":    (*Server).replaceRootVolume,
	"DescribeReplaceRootVolumeTasks": (*Server).describeRootTasks,
}

// ec2Params are, for each served action, the top-level parameter names the SDK's serializer for it can send
// (aws-sdk-go-v2/service/ec2 serializers.go, awsEc2query_serializeOpDocument<Action>Input; lists under their
// singular locationName). TestActionParametersMatchSDK checks this table against the module's source. A
// request with any other parameter is UnknownParameter, as EC2 answers a misspelt one.
var ec2Params = map[string][]string{
	"RunInstances":                   {"AdditionalInfo", "BlockDeviceMapping", "CapacityReservationSpecification", "ClientToken", "CpuOptions", "CreditSpecification", "DisableApiStop", "DisableApiTermination", "DryRun", "EbsOptimized", "ElasticGpuSpecification", "ElasticInferenceAccelerator", "EnablePrimaryIpv6", "EnclaveOptions", "HibernationOptions", "IamInstanceProfile", "ImageId", "InstanceInitiatedShutdownBehavior", "InstanceMarketOptions", "InstanceType", "Ipv6AddressCount", "Ipv6Address", "KernelId", "KeyName", "LaunchTemplate", "LicenseSpecification", "MaintenanceOptions", "MaxCount", "MetadataOptions", "MinCount", "Monitoring", "NetworkInterface", "NetworkPerformanceOptions", "Operator", "Placement", "PrivateDnsNameOptions", "PrivateIpAddress", "RamdiskId", "SecondaryInterface", "SecurityGroupId", "SecurityGroup", "SubnetId", "TagSpecification", "UserData"},
	"DescribeInstances":              {"DryRun", "Filter", "IncludeManagedResources", "InstanceId", "MaxResults", "NextToken"},
	"TerminateInstances":             {"DryRun", "Force", "InstanceId", "SkipOsShutdown"},
	"CreateTags":                     {"DryRun", "ResourceId", "Tag"},
	"DeleteTags":                     {"DryRun", "ResourceId", "Tag"},
	"DescribeSubnets":                {"DryRun", "Filter", "MaxResults", "NextToken", "SubnetId"},
	"CreateSecurityGroup":            {"GroupDescription", "DryRun", "GroupName", "TagSpecification", "VpcId"},
	"DescribeSecurityGroups":         {"DryRun", "Filter", "GroupId", "GroupName", "MaxResults", "NextToken"},
	"AuthorizeSecurityGroupIngress":  {"CidrIp", "DryRun", "FromPort", "GroupId", "GroupName", "IpPermissions", "IpProtocol", "SourceSecurityGroupName", "SourceSecurityGroupOwnerId", "TagSpecification", "ToPort"},
	"RevokeSecurityGroupIngress":     {"CidrIp", "DryRun", "FromPort", "GroupId", "GroupName", "IpPermissions", "IpProtocol", "SecurityGroupRuleId", "SourceSecurityGroupName", "SourceSecurityGroupOwnerId", "ToPort"},
	"AuthorizeSecurityGroupEgress":   {"CidrIp", "DryRun", "FromPort", "GroupId", "IpPermissions", "IpProtocol", "SourceSecurityGroupName", "SourceSecurityGroupOwnerId", "TagSpecification", "ToPort"},
	"RevokeSecurityGroupEgress":      {"CidrIp", "DryRun", "FromPort", "GroupId", "IpPermissions", "IpProtocol", "SecurityGroupRuleId", "SourceSecurityGroupName", "SourceSecurityGroupOwnerId", "ToPort"},
	"DeleteSecurityGroup":            {"DryRun", "GroupId", "GroupName"},
	"AllocateAddress":                {"Address", "CustomerOwnedIpv4Pool", "Domain", "DryRun", "IpamPoolId", "NetworkBorderGroup", "PublicIpv4Pool", "TagSpecification"},
	"AssociateAddress":               {"AllocationId", "AllowReassociation", "DryRun", "InstanceId", "NetworkInterfaceId", "PrivateIpAddress", "PublicIp"},
	"DisassociateAddress":            {"AssociationId", "DryRun", "PublicIp"},
	"ReleaseAddress":                 {"AllocationId", "DryRun", "NetworkBorderGroup", "PublicIp"},
	"DescribeAddresses":              {"AllocationId", "DryRun", "Filter", "PublicIp"},
	"DescribeAccountAttributes":      {"AttributeName", "DryRun"},
	"CreateReplaceRootVolumeTask":    {"ClientToken", "DeleteReplacedRootVolume", "DryRun", "ImageId", "InstanceId", "SnapshotId", "TagSpecification", "VolumeId", "VolumeInitializationRate"},
	"DescribeReplaceRootVolumeTasks": {"DryRun", "Filter", "MaxResults", "NextToken", "ReplaceRootVolumeTaskId"},
}

// form is a parsed Query request.
type form struct{ v url.Values }

func (f form) str(k string) string { return f.v.Get(k) }
func (f form) has(k string) bool   { _, ok := f.v[k]; return ok }

// anyUnder reports whether some parameter is k or starts with k + ".".
func (f form) anyUnder(k string) bool {
	for name := range f.v {
		if name == k || strings.HasPrefix(name, k+".") {
			return true
		}
	}
	return false
}

// indexes are the N of the parameters named prefix.N or prefix.N.*, sorted.
func (f form) indexes(prefix string) []int {
	seen := map[int]bool{}
	for name := range f.v {
		rest, ok := strings.CutPrefix(name, prefix+".")
		if !ok {
			continue
		}
		head, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(head); err == nil && n > 0 {
			seen[n] = true
		}
	}
	out := make([]int, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// list is the values of prefix.1, prefix.2, ...
func (f form) list(prefix string) []string {
	var out []string
	for _, n := range f.indexes(prefix) {
		out = append(out, f.str(fmt.Sprintf("%s.%d", prefix, n)))
	}
	return out
}

// integer reads an integer parameter; present is false when it is absent.
func (f form) integer(k string) (n int, present bool, err *apiError) {
	if !f.has(k) {
		return 0, false, nil
	}
	n, e := strconv.Atoi(f.str(k))
	if e != nil {
		return 0, true, ec2Err("InvalidParameterValue", "Value (%s) for parameter %s is invalid. Expecting an integer.", f.str(k), lowerFirst(k))
	}
	return n, true, nil
}

// boolean reads a boolean parameter; present is false when it is absent.
func (f form) boolean(k string) (b, present bool, err *apiError) {
	if !f.has(k) {
		return false, false, nil
	}
	switch f.str(k) {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, true, ec2Err("InvalidParameterValue", "Value (%s) for parameter %s is invalid. Expecting a boolean.", f.str(k), lowerFirst(k))
}

// tagKV is one Tag.N of a request; hasValue tells an empty value from an absent one.
type tagKV struct {
	Key, Value string
	hasValue   bool
}

// tags reads prefix.N.Key / prefix.N.Value.
func (f form) tags(prefix string) []tagKV {
	var out []tagKV
	for _, n := range f.indexes(prefix) {
		p := fmt.Sprintf("%s.%d.", prefix, n)
		out = append(out, tagKV{Key: f.str(p + "Key"), Value: f.str(p + "Value"), hasValue: f.has(p + "Value")})
	}
	return out
}

// tagSpec is one TagSpecification.N.
type tagSpec struct {
	ResourceType string
	Tags         []tagKV
}

func (f form) tagSpecs() []tagSpec {
	var out []tagSpec
	for _, n := range f.indexes("TagSpecification") {
		p := fmt.Sprintf("TagSpecification.%d.", n)
		out = append(out, tagSpec{ResourceType: f.str(p + "ResourceType"), Tags: f.tags(p + "Tag")})
	}
	return out
}

// canonical is the request's parameters without those named in drop, in a stable form: what "the same
// parameters" compares for ClientToken idempotency.
func (f form) canonical(drop ...string) string {
	v := url.Values{}
	for k, vals := range f.v {
		skip := false
		for _, d := range drop {
			if k == d {
				skip = true
			}
		}
		if !skip {
			v[k] = vals
		}
	}
	return v.Encode()
}

// checkParams refuses a parameter the action's serializer cannot send (ec2Params).
func checkParams(action string, f form) *apiError {
	known := map[string]bool{"Action": true, "Version": true}
	for _, p := range ec2Params[action] {
		known[p] = true
	}
	var names []string
	for name := range f.v {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		head, _, _ := strings.Cut(name, ".")
		if !known[head] {
			return ec2Err("UnknownParameter", "The parameter %s is not recognized", name)
		}
	}
	return nil
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// apiError is an error answer of any of the three services.
type apiError struct {
	status        int
	code, message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

// ec2Status is the HTTP status EC2 answers each error code with: client errors are 400 unless listed,
// server errors 500 or 503 ("EC2 API Reference: Error codes": client errors "are accompanied by a 400-series
// HTTP response code", server errors "by a 500-series HTTP response code").
var ec2Status = map[string]int{
	"AuthFailure":                  http.StatusUnauthorized,
	"MissingAuthenticationToken":   http.StatusUnauthorized,
	"UnauthorizedOperation":        http.StatusForbidden,
	"DryRunOperation":              http.StatusPreconditionFailed,
	"RequestLimitExceeded":         http.StatusServiceUnavailable,
	"InternalError":                http.StatusInternalServerError,
	"InsufficientInstanceCapacity": http.StatusInternalServerError,
	"InsufficientAddressCapacity":  http.StatusInternalServerError,
	"ServiceUnavailable":           http.StatusServiceUnavailable,
	"Unavailable":                  http.StatusServiceUnavailable,
	"NotImplemented":               http.StatusNotImplemented,
}

func ec2Err(code, format string, args ...any) *apiError {
	status, ok := ec2Status[code]
	if !ok {
		status = http.StatusBadRequest
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// notModelled refuses a parameter the fake accepts on the wire but does not model, where ignoring it would
// change the answer: loudly, as a route computefake does not serve.
func notModelled(what string) *apiError {
	return ec2Err("NotImplemented", "ec2fake does not model %s", what)
}

// writeEC2 answers 200 with body as the <Action>Response element.
func writeEC2(w http.ResponseWriter, action, requestID string, body any) {
	if m, ok := body.(interface{ setRequestID(string) }); ok {
		m.setRequestID(requestID)
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("X-Amzn-Requestid", requestID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(xml.Header))
	enc := xml.NewEncoder(w)
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: ec2Namespace}}}
	if err := enc.EncodeElement(body, start); err != nil {
		panic(fmt.Sprintf("ec2fake: encoding %s: %v", action, err))
	}
}

// writeEC2Error answers an EC2 error.
func writeEC2Error(w http.ResponseWriter, e *apiError, requestID string) {
	type errorXML struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	type response struct {
		XMLName   xml.Name   `xml:"Response"`
		Errors    []errorXML `xml:"Errors>Error"`
		RequestID string     `xml:"RequestID"`
	}
	b, _ := xml.Marshal(response{Errors: []errorXML{{e.code, e.message}}, RequestID: requestID})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(b)
}

// meta is the requestId every EC2 answer starts with; answer bodies embed it.
type meta struct {
	RequestID string `xml:"requestId"`
}

func (m *meta) setRequestID(id string) { m.RequestID = id }

// set is an EC2 list: its elements are <item>s.
type set[T any] struct {
	Items []T `xml:"item"`
}

func setOf[T any](items []T) set[T] { return set[T]{Items: items} }

type tagXML struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

func tagSet(tags map[string]string) *set[tagXML] {
	if len(tags) == 0 {
		return nil
	}
	var out []tagXML
	for _, k := range sortedKeys(tags) {
		out = append(out, tagXML{k, tags[k]})
	}
	return &set[tagXML]{Items: out}
}

type returnXML struct {
	meta
	Return bool `xml:"return"`
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

const timeFormat = "2006-01-02T15:04:05.000Z"
