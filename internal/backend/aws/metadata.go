package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// tagName is the tag EC2's console shows as an object's name; the backend finds a proxy's parts by it.
const tagName = "Name"

// liveStates are the instance states of a proxy that exists: terminated ones linger in DescribeInstances
// for a while and are gone for the contract.
var liveStates = []string{"pending", "running", "stopping", "stopped", "shutting-down"}

// objectTags are the tags of every object made for spec: the provider's labels and the name.
func objectTags(spec backend.Spec) map[string]string {
	tags := backend.ManagedLabels(spec)
	tags[tagName] = spec.Name
	return tags
}

func tagMap(tags []ec2types.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	return m
}

// ec2Tags are m as EC2 tags, sorted by key so that requests are the same every time.
func ec2Tags(m map[string]string) []ec2types.Tag {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tags := make([]ec2types.Tag, len(keys))
	for i, k := range keys {
		tags[i] = ec2types.Tag{Key: awssdk.String(k), Value: awssdk.String(m[k])}
	}
	return tags
}

// isAWSTag reports a tag AWS itself sets (aws:...), which no one else may change.
func isAWSTag(key string) bool { return strings.HasPrefix(key, "aws:") }

func managed(tags map[string]string) bool {
	return tags[backend.LabelManagedBy] == backend.ManagedByValue
}

// findInstance finds the live instance named name: the provider's, when one of that name is; another's
// otherwise (which the caller refuses); nil when none is.
func (b *Backend) findInstance(ctx context.Context, r *region, name string) (*ec2types.Instance, error) {
	named, err := b.instancesNamed(ctx, r, name)
	return firstOf(named), err
}

// instancesNamed lists the live instances named name: the proxy's first instance and its members.
func (b *Backend) instancesNamed(ctx context.Context, r *region, name string) ([]ec2types.Instance, error) {
	var found []ec2types.Instance
	obj := instanceObject(r.name, name)
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		found = nil
		out, err := r.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
			{Name: awssdk.String("tag:" + tagName), Values: []string{name}},
			{Name: awssdk.String("instance-state-name"), Values: liveStates},
		}})
		if err != nil {
			return classify(obj, err)
		}
		for _, res := range out.Reservations {
			found = append(found, res.Instances...)
		}
		return nil
	})
	return found, err
}

// firstOf picks the proxy's first instance among instances of its name: members 1 to n-1 of a proxy of
// several share its Name, and the proxy is its member 0.
func firstOf(named []ec2types.Instance) *ec2types.Instance {
	var first *ec2types.Instance
	for i := range named {
		if memberOf(&named[i]) != 0 {
			continue
		}
		if managed(tagMap(named[i].Tags)) {
			return &named[i]
		}
		if first == nil {
			first = &named[i]
		}
	}
	return first
}

// foundProxy is a proxy as findProxy finds it: its first instance, and for a proxy of several whose first
// instance is gone (none is live, or it is shutting down) the live member that stands in for it.
type foundProxy struct {
	first   *ec2types.Instance // nil when none is live
	standIn *ec2types.Instance // nil unless the first is gone and a member lives
}

// ref is the instance the proxy is read through: the first, or the member standing in for it.
func (f foundProxy) ref() *ec2types.Instance {
	if f.standIn != nil {
		return f.standIn
	}
	return f.first
}

// findProxy is findInstance, from the same one call, for a proxy that may have lost its first instance. Every
// member carries the proxy's name, UID, owner, labels and count, and the proxy's parameters are found by its
// name: the live member of lowest k records the whole proxy as the first does, so a Get reads the proxy
// through it (Degraded, member 0 Gone) and an Update makes the first again (restoreMembers), where the proxy
// would otherwise read as gone and its next plan create it anew beside its own members and load balancer.
func (b *Backend) findProxy(ctx context.Context, r *region, name string) (foundProxy, error) {
	named, err := b.instancesNamed(ctx, r, name)
	if err != nil {
		return foundProxy{}, err
	}
	f := foundProxy{first: firstOf(named)}
	if f.first != nil && (!managed(tagMap(f.first.Tags)) || !memberGone(f.first)) {
		return f, nil
	}
	for i := range named {
		if managed(tagMap(named[i].Tags)) && standsInBefore(&named[i], f.standIn) {
			f.standIn = &named[i]
		}
	}
	return f, nil
}

// standsInBefore says whether in, an instance of a proxy's name, would stand in for its gone first instance
// rather than current (nil: none yet): a live member, of lower k than current's.
func standsInBefore(in, current *ec2types.Instance) bool {
	k := memberOf(in)
	return k > 0 && !memberGone(in) && (current == nil || k < memberOf(current))
}

// createdOf is when the proxy an instance belongs to was made: the creation time it carries (tagCreated: every
// member does, and a first instance made again), or, on a first instance launched by Create, its launch.
func createdOf(in *ec2types.Instance) time.Time {
	if created, err := time.Parse(time.RFC3339, tagMap(in.Tags)[tagCreated]); err == nil {
		return created
	}
	return awssdk.ToTime(in.LaunchTime)
}

// createdWithoutFirst is the creation time of a proxy whose first instance is gone, read through a member
// that carries created (createdOf): the earlier of created and, while EC2 still lists it, the ended first's.
// A member launched before members carried tagCreated reports its own launch, a little after the first's.
func createdWithoutFirst(created time.Time, endedFirst *ec2types.Instance) time.Time {
	if endedFirst != nil {
		if c := createdOf(endedFirst); !c.IsZero() && c.Before(created) {
			return c
		}
	}
	return created
}

// storedSpec is the settings parameter: what the instance itself cannot tell when read back, without any
// secret (the username without the password, the TLS certificate's and key pair's fingerprints only).
type storedSpec struct {
	Settings           proxyconf.Settings `json:"settings"`
	TLS                *storedTLS         `json:"tls,omitempty"`
	AMI                string             `json:"ami"`
	IAMInstanceProfile string             `json:"iam_instance_profile"`
	CreateInstanceRole bool               `json:"create_instance_role,omitempty"`
	SecurityGroupIDs   []string           `json:"security_group_ids,omitempty"`
	StaticEgressIP     bool               `json:"static_egress_ip,omitempty"`
	EIPAllocationID    string             `json:"eip_allocation_id,omitempty"`
	WaitForProxy       bool               `json:"wait_for_proxy,omitempty"`
	KMSKeyID           string             `json:"kms_key_id,omitempty"`
	CloudWatchLogs     *CloudWatchLogs    `json:"cloudwatch_logs,omitempty"`
	// Instances and SubnetIDs are a proxy of several instances' (absent for one).
	Instances int      `json:"instances,omitempty"`
	SubnetIDs []string `json:"subnet_ids,omitempty"`
	// Rolling says that an image roll is under way (rollImage): a surge member, number Instances, may exist or
	// hold parameters, which Delete then deletes too.
	Rolling  bool   `json:"rolling,omitempty"`
	ConfigID string `json:"config_id"`
	// ConfigSHA256 is the SHA-256 of the config parameter's value as written: Get tells a config changed
	// behind the provider's back by it, without reading the secrets its MAC needs (and a manifest's parts by
	// the SHA-256 it names).
	ConfigSHA256 string `json:"config_sha256,omitempty"`
	// ConfigFormat is the format the proxy's guest reads, the one of the provider that launched it: absent
	// (FormatWhole) in what providers wrote before configs were packed.
	ConfigFormat guest.ConfigFormat `json:"config_format,omitempty"`
}

// storedTLS tells TLS settings apart without the key: the certificate's SHA-256, and one over certificate
// and key together, so that a new key under the same certificate is still a change.
type storedTLS struct {
	CertificateSHA256 string `json:"certificate_sha256"`
	Fingerprint       string `json:"fingerprint"`
	CertificatePEM    string `json:"certificate_pem"`
	// ClientCAPEM and ClientCRLPEM are read back as given (no secrets): the guest's copy is in the config.
	ClientCAPEM  string `json:"client_ca_pem,omitempty"`
	ClientCRLPEM string `json:"client_crl_pem,omitempty"`
}

func newStoredSpec(s proxyconf.Settings, o Options, p parameters) storedSpec {
	sum := sha256.Sum256(p.config)
	st := storedSpec{Settings: s.WithoutSecrets(), AMI: o.AMI, IAMInstanceProfile: o.IAMInstanceProfile, CreateInstanceRole: o.CreateInstanceRole,
		SecurityGroupIDs: o.SecurityGroupIDs, StaticEgressIP: o.StaticEgressIP, EIPAllocationID: o.EIPAllocationID,
		WaitForProxy: o.WaitForProxy, KMSKeyID: o.KMSKeyID, CloudWatchLogs: o.CloudWatchLogs, ConfigID: p.configID, ConfigSHA256: hex.EncodeToString(sum[:]),
		ConfigFormat: p.format}
	if o.instances() > 1 {
		st.Instances, st.SubnetIDs = o.Instances, o.SubnetIDs
	}
	st.Settings.TLS = nil
	if s.TLS != nil {
		f := s.TLS.Fingerprints()
		st.TLS = &storedTLS{CertificateSHA256: f.Certificate, Fingerprint: f.Pair, CertificatePEM: s.TLS.CertificatePEM,
			ClientCAPEM: s.TLS.ClientCAPEM, ClientCRLPEM: s.TLS.ClientCRLPEM}
	}
	return st
}

// settings are the proxy's settings as read back: no password, and for TLS the certificate and the client
// CA and CRL, not the key.
func (st storedSpec) settings() proxyconf.Settings {
	s := st.Settings
	if st.TLS != nil {
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: st.TLS.CertificatePEM, ClientCAPEM: st.TLS.ClientCAPEM, ClientCRLPEM: st.TLS.ClientCRLPEM}
	}
	return s
}

// readStoredSpec reads the settings parameter; ok is false when there is none (a proxy whose parameters
// were deleted behind the provider's back), and the settings are then not reported. The config and applied
// parameters come in the same request (none is a SecureString, so nothing is decrypted), with the first part
// of the settings and of the config, which is all a typical proxy has; further parts in a second: values
// holds those that exist, for configDrift. The settings are packed (a head and parts), or whole as JSON
// where an earlier provider wrote them.
func (b *Backend) readStoredSpec(ctx context.Context, r *region, name string) (st storedSpec, ok bool, values map[string]string, err error) {
	obj := parameterObject(r.name, guest.ParameterPath(name, ""))
	settingsPath, configPath := guest.ParameterPath(name, guest.ParameterSettings), guest.ParameterPath(name, guest.ParameterConfig)
	first := []string{settingsPath, configPath, guest.ParameterPath(name, guest.ParameterApplied),
		guest.ParameterPath(name, guest.PartName(guest.ParameterSettings, 1)), guest.ParameterPath(name, guest.PartName(guest.ParameterConfig, 1))}
	values, err = b.getParameters(ctx, r, obj, first)
	if err != nil {
		return st, false, nil, err
	}
	var parts []string
	for _, base := range []string{guest.ParameterSettings, guest.ParameterConfig} {
		if h, packed := guest.ParseHead(values[guest.ParameterPath(name, base)]); packed {
			for _, path := range partPaths(name, base, h) {
				if !slices.Contains(first, path) {
					parts = append(parts, path)
				}
			}
		}
	}
	more, err := b.getParameters(ctx, r, obj, parts)
	if err != nil {
		return st, false, nil, err
	}
	maps.Copy(values, more)
	stored, found := []byte(values[settingsPath]), false
	if _, packed := guest.ParseHead(values[settingsPath]); packed {
		stored, found = unpackedValue(name, guest.ParameterSettings, values)
	} else {
		_, found = values[settingsPath]
	}
	// A value that does not parse is not ours to read: the proxy is reported without settings rather than
	// failing the read.
	ok = found && json.Unmarshal(stored, &st) == nil
	return st, ok, values, nil
}

func parameterObject(region, path string) string {
	return "aws SSM parameter " + path + " in region " + region
}

// readBack maps an instance and its stored spec onto the contract, with its members for a proxy of several.
// An instance the provider did not make is refused as Permanent: NotFound would make the next apply create
// over it.
func (b *Backend) readBack(ctx context.Context, r *region, in *ec2types.Instance) (backend.Instance, error) {
	return b.readFound(ctx, r, foundProxy{first: in})
}

// readFound is readBack of a proxy findProxy found, through its first instance or the member standing in.
func (b *Backend) readFound(ctx context.Context, r *region, f foundProxy) (backend.Instance, error) {
	inst, err := b.readStored(ctx, r, f.ref())
	if err != nil {
		return backend.Instance{}, err
	}
	opts, _ := inst.Placement.Options.(*Options)
	if err := b.readMembers(ctx, r, f.first, &inst, opts.instances()); err != nil {
		return backend.Instance{}, err
	}
	return inst, nil
}

// readStored is readBack without the members: the instance and the settings and options its stored spec
// holds, read from the instance and its parameters alone.
func (b *Backend) readStored(ctx context.Context, r *region, in *ec2types.Instance) (backend.Instance, error) {
	tags := tagMap(in.Tags)
	name := tags[tagName]
	obj := instanceObject(r.name, name)
	if !managed(tags) {
		return backend.Instance{}, backend.Permanent(obj, "instance %s has this name but was not made by this provider (no %s tag): rename it, or choose another name",
			awssdk.ToString(in.InstanceId), backend.LabelManagedBy)
	}
	inst := toInstance(r.name, in)
	st, ok, values, err := b.readStoredSpec(ctx, r, name)
	if err != nil {
		return backend.Instance{}, err
	}
	opts, _ := inst.Placement.Options.(*Options)
	if ok {
		s := st.settings()
		inst.Proxy, inst.Port = &s, s.Port
		opts.AMI, opts.IAMInstanceProfile, opts.SecurityGroupIDs = st.AMI, st.IAMInstanceProfile, st.SecurityGroupIDs
		opts.CreateInstanceRole = st.CreateInstanceRole
		opts.StaticEgressIP, opts.EIPAllocationID, opts.WaitForProxy = st.StaticEgressIP, st.EIPAllocationID, st.WaitForProxy
		opts.KMSKeyID, opts.CloudWatchLogs = st.KMSKeyID, st.CloudWatchLogs
		// The guest watches its parameters: every instance made by this backend can change its rules in place.
		inst.Reconfigurable = true
		inst.Drift = configDrift(name, st, values)
		if st.Instances > 1 {
			opts.Instances, opts.SubnetIDs, opts.SubnetID = st.Instances, st.SubnetIDs, ""
		}
	}
	return inst, nil
}

// configDrift says how the config parameter or its parts, or the config the guest reports applied, differs
// from the one the provider last wrote (st), or "" when neither does; values are the parameters
// readStoredSpec read. The config parameter and its parts are Strings anyone with ssm:PutParameter on them
// may overwrite; the guest refuses what the provider's key did not authenticate, but the proxy then no
// longer follows the rules it was given, and the plan must show the update that writes them again. A guest
// that has applied nothing yet (no applied parameter: it is booting) has not drifted.
func configDrift(name string, st storedSpec, values map[string]string) string {
	configPath := guest.ParameterPath(name, guest.ParameterConfig)
	config, ok := values[configPath]
	if !ok {
		return fmt.Sprintf("its config parameter %s is gone", configPath)
	}
	if sum := sha256.Sum256([]byte(config)); st.ConfigSHA256 != "" && hex.EncodeToString(sum[:]) != st.ConfigSHA256 {
		return fmt.Sprintf("its config parameter %s was changed by someone other than this provider", configPath)
	}
	// The manifest is the one written, so the SHA-256 it names is: the parts must still match it. A guest
	// that had applied them runs on, but reads them again at its next start or change, and would refuse them.
	if h, packed := guest.ParseHead(config); packed {
		for _, path := range partPaths(name, guest.ParameterConfig, h) {
			if _, ok := values[path]; !ok {
				return fmt.Sprintf("its config part %s is gone", path)
			}
		}
		if _, ok := unpackedValue(name, guest.ParameterConfig, values); !ok {
			return fmt.Sprintf("its config parts %s to %s were changed by someone other than this provider",
				guest.ParameterPath(name, guest.PartName(guest.ParameterConfig, 1)), guest.PartName(guest.ParameterConfig, h.Parts))
		}
	}
	if v, ok := values[guest.ParameterPath(name, guest.ParameterApplied)]; ok {
		switch applied := guest.ParseApplied(v); {
		case applied.Refused == st.ConfigID:
			return fmt.Sprintf("its guest refused config %s, the one this provider wrote (%s), and runs config %s", st.ConfigID, applied.Reason, applied.ConfigID)
		case applied.ConfigID != st.ConfigID && applied.Refused == "" && applied.ConfigID != appliedPlaceholder:
			return fmt.Sprintf("its guest reports config %s applied, not %s, the one this provider wrote", applied.ConfigID, st.ConfigID)
		}
	}
	return ""
}

// toInstance maps what the instance itself says.
func toInstance(regionName string, in *ec2types.Instance) backend.Instance {
	tags := tagMap(in.Tags)
	name := tags[tagName]
	opts := &Options{
		SubnetID: awssdk.ToString(in.SubnetId), InstanceType: string(in.InstanceType), AMI: awssdk.ToString(in.ImageId),
		Spot: in.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot,
	}
	inst := backend.Instance{
		ID: backend.ProviderID{Backend: Kind, Target: regionName, Name: name}, Name: name,
		UID: tags[backend.LabelUID], Owner: tags[backend.LabelOwner], Labels: userLabels(tags),
		State: stateOf(in.State), InternalAddress: awssdk.ToString(in.PrivateIpAddress),
		// The public address is the one-to-one NAT of the instance's interface (an Elastic IP when one is
		// associated): the source destinations see, and where clients outside connect.
		EgressAddress: awssdk.ToString(in.PublicIpAddress), IngressAddress: awssdk.ToString(in.PublicIpAddress),
		Port:      proxyconf.DefaultPort,
		Placement: backend.Placement{Backend: Kind, Target: regionName, Options: opts},
	}
	inst.CreatedAt = createdOf(in)
	return inst
}

// userLabels are the user's labels among the tags: not the provider's own, not the name, not AWS's.
func userLabels(tags map[string]string) map[string]string {
	out := backend.UserLabels(tags)
	delete(out, tagName)
	delete(out, tagCreated)
	delete(out, TagInstances)
	delete(out, TagMember)
	delete(out, TagImage)
	for k := range out {
		if isAWSTag(k) {
			delete(out, k)
		}
	}
	return out
}

// droppedLabels are the user's labels among tags that want no longer has, sorted: what a label update removes.
// The provider's own tags are never among them (userLabels leaves them out), TagInstances for one, by which a
// delete knows a proxy of several from one.
func droppedLabels(tags, want map[string]string) []string {
	var out []string
	for k := range userLabels(tags) {
		if _, keep := want[k]; !keep {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// stateOf maps EC2's instance states onto the contract's words.
func stateOf(s *ec2types.InstanceState) backend.State {
	if s == nil {
		return backend.StateUnknown
	}
	switch s.Name {
	case ec2types.InstanceStateNamePending:
		return backend.StatePending
	case ec2types.InstanceStateNameRunning:
		return backend.StateRunning
	case ec2types.InstanceStateNameStopping, ec2types.InstanceStateNameStopped:
		return backend.StateStopped
	case ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated:
		return backend.StateDeleting
	}
	return backend.StateUnknown
}
