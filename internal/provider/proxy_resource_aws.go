package provider

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// awsPlacementModel is the resource's aws = { ... } attribute.
type awsPlacementModel struct {
	Region             types.String  `tfsdk:"region"`
	SubnetID           types.String  `tfsdk:"subnet_id"`
	SubnetIDs          types.List    `tfsdk:"subnet_ids"`
	Instances          types.Int64   `tfsdk:"instances"`
	InstanceType       types.String  `tfsdk:"instance_type"`
	AMI                types.String  `tfsdk:"ami"`
	SecurityGroupIDs   types.Set     `tfsdk:"security_group_ids"`
	IAMInstanceProfile types.String  `tfsdk:"iam_instance_profile"`
	CreateInstanceRole types.Bool    `tfsdk:"create_instance_role"`
	StaticEgressIP     types.Bool    `tfsdk:"static_egress_ip"`
	EIPAllocationID    types.String  `tfsdk:"eip_allocation_id"`
	KMSKeyID           types.String  `tfsdk:"kms_key_id"`
	Spot               types.Bool    `tfsdk:"spot"`
	WaitForProxy       types.Bool    `tfsdk:"wait_for_proxy"`
	CloudWatchLogs     *awsLogsModel `tfsdk:"cloudwatch_logs"`
}

// awsLogsModel is aws.cloudwatch_logs: where the access log goes in CloudWatch Logs.
type awsLogsModel struct {
	LogGroup      types.String `tfsdk:"log_group"`
	RetentionDays types.Int64  `tfsdk:"retention_days"`
}

// awsPlacementSchema is the resource's aws block: where (region, subnet), what (type, image, role), and the
// egress address.
func awsPlacementSchema() schema.SingleNestedAttribute {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	inAWS := func(name string) path.Expression { return path.MatchRoot("aws").AtName(name) }
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "Run the proxy as an EC2 instance (preview: tested against a fake of EC2 and SSM), with IMDSv2 required, a " +
			"security group of its own that admits `allowed_client_cidrs` on the proxy port only (one rule per range: at most 60 IPv4 and " +
			"60 IPv6 ranges, VPC's default quota of rules per group; a region whose quota is lower is refused when applied), and its configuration in SSM " +
			"parameters under `/egress-proxy/<name>/` (the password hash and TLS key in a `SecureString`) that the instance's role " +
			"reads at boot and watches afterwards, the rules compressed in Standard parameters (at most nine parts of 4 KB), so a plan whose " +
			"rules would not fit fails on `allowed_destinations`. Changing anything here but `wait_for_proxy`, `instances` between two counts above one, and `ami` of a proxy of several instances, replaces the proxy.",
		PlanModifiers: []planmodifier.Object{requiresReplaceExcept("wait_for_proxy").unlessSame("instances", severalInPlace(1)).
			unlessSame("ami", rolledWhenSeveral)},
		Validators: []validator.Object{awsClientRules{}, awsParameterSizes{}},
		Attributes: map[string]schema.Attribute{
			"region": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				PlanModifiers:       keep,
				MarkdownDescription: "Region, one the provider's `aws` block configures; its default `region` when unset.",
				Validators:          []validator.String{attribute_validator.Func("region", aws.ValidateRegion)},
			},
			"subnet_id": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Subnet the instance runs in; the proxy's security group is made in its VPC. A public subnet gives the proxy a public address. " +
					"Exactly one of `subnet_id` (one instance) and `subnet_ids` (several) is set.",
				Validators: []validator.String{attribute_validator.Func("subnet id", aws.ValidateSubnetID),
					stringvalidator.ExactlyOneOf(inAWS("subnet_ids"))},
			},
			"subnet_ids": schema.ListAttribute{
				Optional:    true,
				ElementType: types.StringType,
				MarkdownDescription: "With `instances` above 1, the subnets the instances are spread over, each in its own Availability Zone of one VPC " +
					"(at least two): instance `i` runs in `subnet_ids[i % n]`, and the load balancer has a node in each.",
				Validators: []validator.List{listvalidator.SizeAtLeast(2), listvalidator.UniqueValues(),
					listvalidator.ValueStringsAre(attribute_validator.Func("subnet id", aws.ValidateSubnetID))},
			},
			"instances": schema.Int64Attribute{
				Optional: true,
				Computed: true,
				MarkdownDescription: fmt.Sprintf("How many instances serve the proxy, 1 to %d. Defaults to 1: one instance, reached at its own "+
					"address, as before. Above 1, the instances are spread over `subnet_ids` (one per Availability Zone) behind an internal "+
					"Network Load Balancer of the proxy's own: a TCP listener on the proxy port forwards to a target group of the instances, "+
					"health-checked over HTTP on the health port (%d), which the security group admits from the subnets' ranges. `proxy_url` "+
					"names the load balancer's DNS name, which answers the nodes in service (use it: `internal_address`, the node in the first "+
					"subnet, serves the instances of its zone alone); each instance keeps its own public address (`members`, `egress_addresses`), "+
					"and `state` is `Degraded` while some fail their health check. Not with `static_egress_ip` or `eip_allocation_id`. A load "+
					"balancer costs by the hour and by the capacity units it uses (the provider's documentation, High availability). A change "+
					"between two counts above one is made in place, behind the same load balancer: new instances are launched in the next "+
					"subnets and registered; the highest-numbered ones are deregistered, kept until the load balancer has drained their "+
					"connections (the target group's deregistration delay, 300 seconds), then terminated. A change to or from one instance "+
					"replaces the proxy.", aws.MaxInstances, proxyconf.DefaultHealthPort),
				Validators:    []validator.Int64{int64validator.Between(1, aws.MaxInstances), awsInstances{}},
				PlanModifiers: []planmodifier.Int64{instancesDefault{def: 1}},
			},
			"instance_type": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(aws.DefaultInstanceType),
				MarkdownDescription: "Instance type. Defaults to `" + aws.DefaultInstanceType + "`. A Graviton type (`t4g.small`) takes an arm64 image.",
				Validators:          []validator.String{attribute_validator.Func("instance type", aws.ValidateInstanceType)},
			},
			"ami": schema.StringAttribute{
				Optional:      true,
				Computed:      true,
				PlanModifiers: keep,
				MarkdownDescription: "Image. When unset, the latest Debian 12 image of the instance type's architecture, read from the public SSM " +
					"parameter `/aws/service/debian/release/12/latest/<arch>` when the proxy is created; it reads back as that image, so a newer " +
					"Debian image later does not replace the proxy. A new image replaces a proxy of one instance; over a proxy of several it is rolled in " +
					"place, one instance at a time behind the load balancer, each keeping its id and addresses while its root volume is made again " +
					"from the image (a surge instance of the new image serves meanwhile).",
				Validators: []validator.String{attribute_validator.Func("image id", aws.ValidateAMI)},
			},
			"security_group_ids": schema.SetAttribute{
				Optional:            true,
				ElementType:         types.StringType,
				MarkdownDescription: "More security groups for the instance, beside the one the provider makes for the proxy port.",
				Validators:          []validator.Set{setvalidator.ValueStringsAre(attribute_validator.Func("security group id", aws.ValidateSecurityGroupID))},
			},
			"iam_instance_profile": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Instance profile (name or ARN) of your own whose role lets the instance read its configuration: `ssm:GetParameters` on " +
					"`arn:aws:ssm:<region>:<account>:parameter/egress-proxy/*`, `ssm:PutParameter` on `.../egress-proxy/*/applied`, each on the " +
					"condition that the parameter's tag `egress-proxy-instance` is the requesting instance's ARN (`${ec2:SourceInstanceARN}`), " +
					"so that one proxy reaches no other's; `kms:Decrypt` with the secrets' key; and with `cloudwatch_logs`, `logs:CreateLogStream` " +
					"and `logs:PutLogEvents` on its log stream. See the provider's documentation, AWS. " +
					"Required unless `create_instance_role` is true.",
				Validators: []validator.String{attribute_validator.Func("instance profile", aws.ValidateInstanceProfile),
					attribute_validator.RequiredUnlessTrue(inAWS("create_instance_role"), "the instance's role reads the proxy's configuration from SSM")},
			},
			"create_instance_role": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				MarkdownDescription: "Make a role and an instance profile for this proxy alone (`" + aws.InstanceRolePrefix + "<name>-<region>`, " +
					"tagged like everything the provider makes, trusting `ec2.amazonaws.com`), instead of naming your own in `iam_instance_profile`. " +
					"The role's one inline policy allows `ssm:GetParameters` on the proxy's own parameters (`parameter/egress-proxy/<name>/*` of " +
					"its region and account), `ssm:PutParameter` on its own `applied`, with `kms_key_id` `kms:Decrypt` of its own " +
					"parameters through SSM, and with `cloudwatch_logs` `logs:CreateLogStream` and `logs:PutLogEvents` on its own log stream: " +
					"nothing of another proxy, without relying on tags. Destroying the proxy deletes both. Needs the " +
					"IAM statements of the caller policy (the provider's documentation, AWS permissions), for accounts whose deployments " +
					"may make roles. Defaults to `false`.",
				Validators: []validator.Bool{attribute_validator.TrueConflictsWith(inAWS("iam_instance_profile"),
					"the provider makes the proxy's own instance profile")},
				PlanModifiers: []planmodifier.Bool{defaultAddedLater{}},
			},
			"static_egress_ip": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				MarkdownDescription: "Allocate an Elastic IP for the proxy's egress, tagged with `name`, which must be set: when the proxy is replaced, the " +
					"address is kept and the new instance of the same name takes it, so the egress address does not change; it is released " +
					"when the proxy is destroyed. Defaults to `false`. An address left by a replacement that never finished is listed by `egress_proxy_orphans`. " +
					"To keep an address beyond the proxy's life, allocate it yourself and set `eip_allocation_id`.",
				Validators: []validator.Bool{attribute_validator.TrueRequiresValid(path.MatchRoot("name"),
					"the address is found again by the proxy's name so that a replacement keeps it, and a name derived from `uid` changes with every replacement",
					func(string) error { return nil })},
			},
			"eip_allocation_id": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Allocation id of an Elastic IP you allocated, to use as the egress address. The provider never releases it.",
				Validators: []validator.String{attribute_validator.Func("allocation id", aws.ValidateAllocationID),
					stringvalidator.ConflictsWith(inAWS("static_egress_ip"))},
			},
			"kms_key_id": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Customer-managed KMS key (id, ARN, `alias/NAME` or alias ARN) that encrypts the proxy's secrets parameter. Unset, SSM " +
					"uses the account's `alias/aws/ssm`, which every principal of the account may use through SSM. SSM asks KMS with the encryption " +
					"context `PARAMETER_ARN` = the parameter's ARN, so the key policy can let each proxy's role decrypt its own parameter only: " +
					"see the Security model in the provider's documentation.",
				Validators: []validator.String{attribute_validator.Func("KMS key", aws.ValidateKMSKeyID)},
			},
			"spot": schema.BoolAttribute{
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
				MarkdownDescription: "A one-time Spot instance, terminated when interrupted (the next plan then recreates the proxy). Defaults to `false`.",
			},
			"cloudwatch_logs": awsLogsSchema(),
			"wait_for_proxy": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				MarkdownDescription: "Wait, within the create timeout, until the instance reports (its `applied` parameter) that Squid runs its configuration. " +
					"Defaults to `false`: the apply returns once the instance runs, while Squid may still be installing.",
			},
		},
	}
}

// awsLogsSchema is aws.cloudwatch_logs, checked at plan time by the backend's own rules.
func awsLogsSchema() schema.SingleNestedAttribute {
	retentions := make([]int64, len(aws.LogRetentionDays))
	for i, d := range aws.LogRetentionDays {
		retentions[i] = int64(d)
	}
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "Send the access log (one line per request, see the access log guide) to CloudWatch Logs, which AWS charges for by " +
			"what it ingests and stores: unset, the log stays on the instance. The instance's agent follows Squid's log and sends its lines, " +
			"in order, a batch every few seconds, to the stream named after the proxy, signed with the instance role's credentials; it makes " +
			"the stream, so the role needs `logs:CreateLogStream` and `logs:PutLogEvents` on it (`create_instance_role` grants exactly these " +
			"on the proxy's own stream; the instance role policy in the provider's documentation, on the proxies' own groups). `{}` gives the " +
			"proxy a group of its own, `" + aws.LogGroupPrefix + "<name>`, tagged like everything the provider makes and deleted with the proxy, " +
			"its lines with it (with `name` set, a replacement keeps it for the new proxy). Changing it replaces the proxy.",
		Attributes: map[string]schema.Attribute{
			"log_group": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "A log group of your own, in the proxy's region, shared by proxies, each writing its stream `<name>`: the provider never " +
					"makes, changes or deletes it, and the stream stays in it after the proxy is destroyed. Not under `" + aws.LogGroupPrefix + "`, " +
					"where the proxies' own groups are. Unset, the proxy gets its own group.",
				Validators: []validator.String{attribute_validator.Func("log group", aws.ValidateLogGroupName)},
			},
			"retention_days": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: fmt.Sprintf("How many days the proxy's own group keeps the lines, one of the values CloudWatch Logs takes "+
					"(%s). Defaults to %d. Not with `log_group`, whose retention is its owner's.", joinInt32(aws.LogRetentionDays), aws.DefaultLogRetentionDays),
				Validators: []validator.Int64{int64validator.OneOf(retentions...),
					int64validator.ConflictsWith(path.MatchRelative().AtParent().AtName("log_group"))},
			},
		},
	}
}

func joinInt32(v []int32) string {
	s := make([]string, len(v))
	for i, d := range v {
		s[i] = strconv.Itoa(int(d))
	}
	return strings.Join(s, ", ")
}

// logs maps aws.cloudwatch_logs onto the backend's options; nil when unset.
func (m *awsLogsModel) logs() *aws.CloudWatchLogs {
	if m == nil {
		return nil
	}
	return &aws.CloudWatchLogs{LogGroup: m.LogGroup.ValueString(), RetentionDays: int32(m.RetentionDays.ValueInt64())} //nolint:gosec // one of LogRetentionDays
}

// awsLogsFrom is aws.cloudwatch_logs as the backend read it back.
func awsLogsFrom(c *aws.CloudWatchLogs) *awsLogsModel {
	if c == nil {
		return nil
	}
	m := &awsLogsModel{LogGroup: optionalString(c.LogGroup), RetentionDays: types.Int64Null()}
	if c.RetentionDays != 0 {
		m.RetentionDays = types.Int64Value(int64(c.RetentionDays))
	}
	return m
}

// placement maps the attribute onto the contract; empty values take the backend's defaults.
func (a *awsPlacementModel) placement() backend.Placement {
	o := &aws.Options{
		SubnetID: a.SubnetID.ValueString(), SubnetIDs: stringList(a.SubnetIDs), Instances: int(a.Instances.ValueInt64()),
		InstanceType: a.InstanceType.ValueString(), AMI: a.AMI.ValueString(),
		IAMInstanceProfile: a.IAMInstanceProfile.ValueString(), StaticEgressIP: a.StaticEgressIP.ValueBool(),
		EIPAllocationID: a.EIPAllocationID.ValueString(), Spot: a.Spot.ValueBool(), WaitForProxy: a.WaitForProxy.ValueBool(),
		KMSKeyID: a.KMSKeyID.ValueString(), CreateInstanceRole: a.CreateInstanceRole.ValueBool(), CloudWatchLogs: a.CloudWatchLogs.logs(),
	}
	o.SecurityGroupIDs = stringsOf(a.SecurityGroupIDs)
	return backend.Placement{Backend: aws.Kind, Target: a.Region.ValueString(), Options: o}
}

// setResolved records the region and image the backend chose where the configuration left them unset.
func (a *awsPlacementModel) setResolved(inst backend.Instance) {
	if a.Region.IsNull() || a.Region.IsUnknown() {
		a.Region = types.StringValue(inst.ID.Target)
	}
	o, ok := inst.Placement.Options.(*aws.Options)
	if !ok || o == nil {
		return
	}
	if a.AMI.IsNull() || a.AMI.IsUnknown() {
		a.AMI = optionalString(o.AMI)
	}
	// A state written before create_instance_role existed holds null where the configuration's default is
	// false: reading what the proxy was made with keeps the next plan from replacing it (TestAccUpgrade_aws).
	if a.CreateInstanceRole.IsNull() || a.CreateInstanceRole.IsUnknown() {
		a.CreateInstanceRole = types.BoolValue(o.CreateInstanceRole)
	}
	// Likewise instances, which a state of before holds null for a proxy of one.
	if a.Instances.IsNull() || a.Instances.IsUnknown() {
		a.Instances = types.Int64Value(int64(max(o.Instances, 1)))
	}
}

// awsPlacementFrom builds the attribute of an imported proxy from what the backend read back.
func awsPlacementFrom(p backend.Placement) *awsPlacementModel {
	o := aws.Options{}
	if read, ok := p.Options.(*aws.Options); ok && read != nil {
		o = *read
	}
	groups := types.SetNull(types.StringType)
	if len(o.SecurityGroupIDs) > 0 {
		groups = stringSetOf(o.SecurityGroupIDs)
	}
	instanceType := o.InstanceType
	if instanceType == "" {
		instanceType = aws.DefaultInstanceType
	}
	subnets := types.ListNull(types.StringType)
	if len(o.SubnetIDs) > 0 {
		subnets = types.ListValueMust(types.StringType, stringValues(o.SubnetIDs))
	}
	return &awsPlacementModel{
		Region: types.StringValue(p.Target), SubnetID: optionalString(o.SubnetID), SubnetIDs: subnets,
		Instances: types.Int64Value(int64(max(o.Instances, 1))), InstanceType: types.StringValue(instanceType),
		AMI: optionalString(o.AMI), SecurityGroupIDs: groups, IAMInstanceProfile: optionalString(o.IAMInstanceProfile),
		StaticEgressIP: types.BoolValue(o.StaticEgressIP), EIPAllocationID: optionalString(o.EIPAllocationID),
		Spot: types.BoolValue(o.Spot), WaitForProxy: types.BoolValue(o.WaitForProxy), KMSKeyID: optionalString(o.KMSKeyID),
		CreateInstanceRole: types.BoolValue(o.CreateInstanceRole), CloudWatchLogs: awsLogsFrom(o.CloudWatchLogs),
	}
}

// defaultAddedLater keeps the null a state written before create_instance_role existed holds, where the
// configuration leaves the attribute to its default (false, the behaviour such a proxy was made with): planning
// false against it would be a change of the aws block, which replaces the proxy, on a plan without refresh.
// A refresh reads the value back (setResolved), so the null lasts until then.
type defaultAddedLater struct{}

func (defaultAddedLater) Description(context.Context) string {
	return "an existing proxy's state without the attribute keeps it unset while the configuration leaves it to its default"
}

func (d defaultAddedLater) MarkdownDescription(ctx context.Context) string { return d.Description(ctx) }

func (defaultAddedLater) PlanModifyBool(_ context.Context, req planmodifier.BoolRequest, resp *planmodifier.BoolResponse) {
	if req.State.Raw.IsNull() || !req.StateValue.IsNull() || !req.ConfigValue.IsNull() {
		return
	}
	if !req.PlanValue.IsUnknown() && !req.PlanValue.ValueBool() {
		resp.PlanValue = req.StateValue
	}
}
