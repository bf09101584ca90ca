package provider

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/boolvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// kvmPlacementSchema is the resource's kvm block: the host, the domain's size, its disk image, its network.
// Everything but the waits replaces the proxy, except an image_url that names another copy of the same image.
func kvmPlacementSchema() schema.SingleNestedAttribute {
	// What the host resolved (its defaults, the type "auto" became) stays known across plans.
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	inKVM := func(name string) path.Expression { return path.MatchRoot("kvm").AtName(name) }
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "Run the proxy as a libvirt domain on a host configured on the provider. " +
			"Changing anything here but `wait_for_address`, `wait_for_proxy` and `syslog_target` replaces the proxy, " +
			"except `image_url` changed to another copy of the same image (same `image_sha256`); after an import, an `image_file` " +
			"or `image_sha256` that names the image the proxy already runs on; and, on a proxy of several `instances`, a new image " +
			"(`base_volume`, `image_file`, `image_url` and `image_sha256`), which is rolled over its VMs in place, one at a time.",
		PlanModifiers: []planmodifier.Object{
			requiresReplaceExcept("wait_for_address", "wait_for_proxy").
				inPlaceIfReconfigurable("syslog_target").
				unlessSame("image_file", anyOf(imageFileOfBaseVolume, rolledWhenSeveral)).
				unlessSame("image_url", anyOf(sameURLImage, rolledWhenSeveral)).
				unlessSame("image_sha256", anyOf(sameURLImage, rolledWhenSeveral)).
				unlessSame("base_volume", rolledWhenSeveral).
				unlessSame("instances", sameInstances),
		},
		Attributes: map[string]schema.Attribute{
			"host": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(defaultKVMHost),
				MarkdownDescription: "Name of a host in the provider's `kvm.hosts`. Defaults to `" + kvm.DefaultHostName + "`.",
				Validators:          []validator.String{kvmHost()},
			},
			"instances": schema.Int64Attribute{
				Optional:      true,
				Computed:      true,
				Default:       int64default.StaticInt64(kvm.DefaultInstances),
				PlanModifiers: []planmodifier.Int64{instancesAddedLater{}},
				MarkdownDescription: fmt.Sprintf("How many VMs serve the proxy, from 1 to %d. Defaults to `%d`. "+
					"More than one are that many domains on the host and its libvirt network (`<name>`, `<name>-2`, ...), each with "+
					"an address of its own reserved on the network, behind one virtual address, also reserved there, that keepalived "+
					"in the VMs moves by VRRP to a VM whose Squid answers: `internal_address` is the virtual address, `members` the VMs. "+
					"Needs a libvirt network: not with `user_net`, `bridge`, `mac` or `ip`. Changing it replaces the proxy. "+
					"A new image is rolled over the VMs one at a time, the last first: each VM still serving hands the virtual address "+
					"over (new connections held, those in progress drained, keepalived stopped), gets a new root disk and boots from "+
					"it, and is waited for until it serves and its keepalived runs, while the others serve.",
					kvm.MaxInstances, kvm.DefaultInstances),
				Validators: []validator.Int64{int64validator.Between(1, kvm.MaxInstances), kvmInstances()},
			},
			"vcpus": schema.Int64Attribute{
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(kvm.DefaultVCPUs),
				MarkdownDescription: fmt.Sprintf("Virtual CPUs. Defaults to `%d`.", kvm.DefaultVCPUs),
				Validators:          []validator.Int64{int64validator.Between(1, 64)},
			},
			"memory_mib": schema.Int64Attribute{
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(kvm.DefaultMemoryMiB),
				MarkdownDescription: fmt.Sprintf("Memory in MiB. Defaults to `%d`.", kvm.DefaultMemoryMiB),
				Validators:          []validator.Int64{int64validator.Between(128, 1<<20)},
			},
			"disk_gib": schema.Int64Attribute{
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(kvm.DefaultDiskGiB),
				MarkdownDescription: fmt.Sprintf("Root disk size in GiB. Defaults to `%d`.", kvm.DefaultDiskGiB),
				Validators:          []validator.Int64{int64validator.Between(1, 4096)},
			},
			"domain_type": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				PlanModifiers:       keep,
				MarkdownDescription: "`kvm`, `qemu` or `auto`; the host's setting when unset. Reads back as the type the host resolved.",
				Validators:          []validator.String{stringvalidator.OneOf(kvm.DomainTypes...)},
			},
			"pool": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				PlanModifiers:       keep,
				MarkdownDescription: "Storage pool for the proxy's volumes; the host's default when unset.",
				Validators:          []validator.String{attribute_validator.NotEmpty()},
			},
			"base_volume": schema.StringAttribute{
				Optional:      true,
				Computed:      true,
				PlanModifiers: []planmodifier.String{baseVolumeOfImage{}},
				MarkdownDescription: "Base image volume in the pool that the root disk overlays; the host's default when unset. " +
					"Read back, it names the volume of `image_file` or `image_url` when one is set, and both volumes (`A (and B on some of its instances)`) " +
					"while the VMs of a proxy of several instances run different images, as after an image roll cut short: the next apply finishes it.",
				Validators: []validator.String{attribute_validator.NotEmpty()},
			},
			"network": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				PlanModifiers:       keep,
				MarkdownDescription: "libvirt network of the interface; the host's default when neither this nor `bridge` is set.",
				Validators:          []validator.String{attribute_validator.NotEmpty(), stringvalidator.ConflictsWith(inKVM("bridge"))},
			},
			"bridge": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Host bridge to attach the interface to, instead of a libvirt network.",
				Validators:          []validator.String{attribute_validator.NotEmpty()},
			},
			"mac": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				PlanModifiers:       keep,
				MarkdownDescription: "Fixed MAC address; derived from `uid` when unset.",
				Validators:          []validator.String{attribute_validator.MAC()},
			},
			"ip": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Fixed IPv4 address on the libvirt network: it becomes a DHCP host reservation there and the proxy's " +
					"address before the guest boots.",
				Validators: []validator.String{attribute_validator.IPv4(), stringvalidator.ConflictsWith(inKVM("bridge"))},
			},
			"image_file": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Local path (where Terraform runs) of a qcow2 or raw disk image to use instead of `base_volume`. " +
					"It is uploaded once into the pool as `egress-image-<sha256 prefix>` and shared by every proxy made from the same content; " +
					"the provider never deletes image volumes.",
				Validators: []validator.String{attribute_validator.NotEmpty(), stringvalidator.ConflictsWith(inKVM("base_volume"))},
			},
			"image_url": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "URL (`http` or `https`) of a qcow2 or raw disk image to use instead of `base_volume` or `image_file`, such as a Debian `genericcloud` image; " +
					"needs `image_sha256`. The machine running Terraform downloads it and streams it into the pool as `egress-image-<sha256 prefix>-<size>.qcow2` (or `.raw`), " +
					"checking it against `image_sha256` on the way: an image that does not match, or a download that breaks off, leaves nothing in the pool. " +
					"Every proxy of the same image shares that volume, and a proxy whose image is in the pool already downloads nothing. " +
					"The server must send the file's `Content-Length`; a proxy between Terraform and the server is taken from `HTTPS_PROXY`/`NO_PROXY`. " +
					"The provider never deletes image volumes.",
				Validators: []validator.String{
					attribute_validator.URLWithScheme(kvm.ImageURLSchemes...),
					stringvalidator.AlsoRequires(inKVM("image_sha256")),
					stringvalidator.ConflictsWith(inKVM("base_volume"), inKVM("image_file")),
				},
			},
			"image_sha256": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "SHA-256 of the image at `image_url`, as 64 hex digits (`sha256sum` prints it). It names the image's volume in the pool, and the download must match it. " +
					"Changing it replaces a proxy of one instance, and rolls the new image over the VMs of a proxy of several.",
				Validators: []validator.String{
					stringvalidator.RegexMatches(kvm.ImageSHA256Pattern, "must be 64 hex digits, the image's SHA-256 as sha256sum prints it"),
					stringvalidator.AlsoRequires(inKVM("image_url")),
				},
			},
			"user_net": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Use QEMU user-mode networking (passt) instead of a libvirt network or bridge, with the proxy port forwarded to " +
					"`forward_address`:`forward_port` on the host. For laptops without a libvirt network.",
				Validators: []validator.Bool{
					boolvalidator.ConflictsWith(inKVM("network"), inKVM("bridge"), inKVM("ip")),
					boolvalidator.AlsoRequires(inKVM("forward_port")),
				},
			},
			"forward_address": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Host address the forwarded proxy port listens on with `user_net`. Defaults to `" + kvm.DefaultForwardAddress +
					"`: only clients on the host itself reach the proxy. Set `0.0.0.0` to listen on every address of the host.",
				Validators: []validator.String{attribute_validator.IPv4(), stringvalidator.AlsoRequires(inKVM("user_net"))},
			},
			"forward_port": schema.Int64Attribute{
				Optional:            true,
				MarkdownDescription: "Host port forwarded to the proxy port with `user_net`.",
				Validators:          []validator.Int64{attribute_validator.Port(), int64validator.AlsoRequires(inKVM("user_net"))},
			},
			"wait_for_proxy": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(true),
				MarkdownDescription: "Wait, within the create timeout, until the proxy answers on its health port. Defaults to `true`. " +
					"When the proxy's address is on no network of the machine Terraform runs on (a remote host's libvirt network, for example), " +
					"it is not probed: the apply succeeds with a warning saying what it waited for instead. Ignored when `wait_for_address` is false.",
			},
			"syslog_target": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Also forward the access log to this syslog receiver: `udp://HOST:PORT` or `tcp://HOST:PORT` " +
					"(HOST an IPv4 address, an IPv6 address in brackets or a DNS name). The access log always goes to the guest's journal " +
					"(`journalctl -t " + kvm.JournalIdentifier + " -o cat`); the guest's rsyslog sends each line to the target too, as the " +
					"message of an RFC 5424 record, from the VM's own address. Changing it changes the running proxy in place through " +
					"the guest agent when the proxy can be reconfigured (as it reported when it was last read), and replaces it otherwise.",
				Validators: []validator.String{syslogTarget()},
			},
			"wait_for_address": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(true),
				MarkdownDescription: "Wait, within the create timeout, until the network's DHCP leases or the guest agent report the proxy's address. " +
					"Defaults to `true`. Turn off on hosts where nothing reports one.",
			},
		},
	}
}
