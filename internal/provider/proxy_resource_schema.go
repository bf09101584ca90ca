package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// egressAddressDescription says what each backend reports: a user copies it into a partner's allow-list, so it
// is the address destinations see or null, and every case where the backend cannot tell is named.
func egressAddressDescription() string {
	notes := []string{"The source address destinations see on the proxy's outbound connections, for a partner's " +
		"allow-list; null where the backend cannot know it."}
	for _, d := range backendDescriptors {
		notes = append(notes, d.egressAddressNote())
	}
	return strings.Join(append(notes, "Never a load balancer's address: that is `ingress_address`."), " ")
}

// ingressAddressDescription: where clients outside connect, which is not where the proxy's traffic leaves from
// on kubernetes, the reason the two attributes are apart.
func ingressAddressDescription() string {
	notes := []string{"Where clients outside the proxy's network connect to it, when there is such an address; null otherwise."}
	for _, d := range backendDescriptors {
		notes = append(notes, d.ingressAddressNote())
	}
	return strings.Join(notes, " ")
}

// placementAttributes are the backends' attributes, of which a proxy sets exactly one.
func placementAttributes() map[string]schema.Attribute {
	attrs := map[string]schema.Attribute{}
	for _, d := range backendDescriptors {
		attrs[string(d.kind())] = d.placementSchema()
	}
	return attrs
}

const labelRulesDescription = "Keys: lowercase letters, digits, `-` and `_`, starting with a letter, at most 63 characters; " +
	"keys starting with `egress-` that the provider uses itself are reserved. Values: at most 63 lowercase letters, digits, `-` and `_`."

func statesDescription() string {
	names := make([]string, len(backend.States))
	for i, s := range backend.States {
		names[i] = "`" + string(s) + "`"
	}
	return strings.Join(names, ", ")
}

func providerIDFormsMarkdown() string {
	forms := idForms.Strings()
	for i, f := range forms {
		forms[i] = "`" + f + "`"
	}
	return orList(forms)
}

// codeList formats values as a list of code spans, for descriptions.
func codeList(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "`" + v + "`"
	}
	return strings.Join(quoted, ", ")
}

func backendNames() []string {
	kinds := backendKinds()
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = "`" + string(k) + "`"
	}
	return names
}

func backendPaths() []path.Expression {
	kinds := backendKinds()
	exprs := make([]path.Expression, len(kinds))
	for i, k := range kinds {
		exprs[i] = path.MatchRoot(string(k))
	}
	return exprs
}

func proxyResourceSchema(ctx context.Context) schema.Schema {
	return schema.Schema{
		Version: proxyResourceSchemaVersion,
		MarkdownDescription: "An egress proxy: a Squid forward proxy for HTTP and HTTPS (`CONNECT`) through which workloads " +
			"reach only the allowed destinations, from a known address. Set exactly one of " + orList(backendNames()) + " " +
			"to choose where it runs. The rules (`allowed_client_cidrs`, `allowed_destinations`, `allowed_ports`, `allowed_private_cidrs`, " +
			"`max_connections_per_client`, `auth`, `rule_sets`, `denied_destinations`, `tls.client_ca_pem`, `tls.client_crl_pem`, `log_format` and `metrics`) change in place " +
			"where the backend can reconfigure the running proxy, and replace it where it cannot; `labels` always change in place. " +
			"The placement (all of it but what its own description names), `name` when set, `port` and the rest of `tls` replace it.",
		Attributes: mergeAttributes(
			placementAttributes(),
			ruleAttributes(),
			policyAttributes(),
			credentialAttributes(),
			logFormatAttributes(),
			metricsAttributes(),
			computedAttributes(),
			membersAttributes(),
		),
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Read: true, Update: true, Delete: true}),
		},
	}
}

// ruleAttributes are what the proxy lets through, and its name, port and labels.
func ruleAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		// Proxy behaviour.
		"name": schema.StringAttribute{
			Optional: true, Computed: true,
			MarkdownDescription: "Name of the backend objects. Derived from `uid` when unset. 1 to 63 lowercase letters, digits or hyphens, starting with a letter. " +
				"Changing it replaces the proxy; removing it from the configuration keeps the current name.",
			PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplaceIfConfigured(), stringplanmodifier.UseStateForUnknown()},
			Validators:    []validator.String{attribute_validator.Name()},
		},
		"port": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(proxyconf.DefaultPort),
			MarkdownDescription: fmt.Sprintf("Port the proxy listens on; not %d, where its health check answers. Defaults to `%d`. Changing it replaces the proxy.", proxyconf.DefaultHealthPort, proxyconf.DefaultPort),
			PlanModifiers:       []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			Validators:          []validator.Int64{attribute_validator.Port(), int64validator.NoneOf(proxyconf.DefaultHealthPort)},
		},
		"allowed_client_cidrs": schema.SetAttribute{
			Required: true, ElementType: types.StringType,
			MarkdownDescription: "Client address ranges that may use the proxy, in canonical CIDR form (`10.0.0.0/8`). Every other client is refused. " +
				"The plan warns when it holds `0.0.0.0/0` or `::/0` and `auth` is not set.",
			PlanModifiers: []planmodifier.Set{setRequiresReplaceUnlessReconfigurable()},
			Validators:    []validator.Set{setvalidator.SizeBetween(1, proxyconf.MaxAllowedClientCIDRs), setvalidator.ValueStringsAre(attribute_validator.ClientCIDR())},
		},
		"allowed_destinations": schema.SetAttribute{
			Optional: true, Computed: true, ElementType: types.StringType,
			Default:             setdefault.StaticValue(types.SetValueMust(types.StringType, []attr.Value{})),
			MarkdownDescription: "Host names the proxy lets clients reach: `api.example.com` for one host, `.example.com` for the domain and all its subdomains. Empty (the default) denies every destination.",
			PlanModifiers:       []planmodifier.Set{setRequiresReplaceUnlessReconfigurable()},
			Validators:          []validator.Set{setvalidator.SizeAtMost(proxyconf.MaxAllowedDestinations), setvalidator.ValueStringsAre(attribute_validator.Destination())},
		},
		"allowed_ports": schema.SetAttribute{
			Optional: true, Computed: true, ElementType: types.Int64Type,
			Default:             setdefault.StaticValue(types.SetValueMust(types.Int64Type, []attr.Value{types.Int64Value(443)})),
			MarkdownDescription: "Destination ports `CONNECT` may reach. Defaults to 443 only.",
			PlanModifiers:       []planmodifier.Set{setRequiresReplaceUnlessReconfigurable()},
			Validators:          []validator.Set{setvalidator.SizeBetween(1, proxyconf.MaxAllowedPorts), setvalidator.ValueInt64sAre(attribute_validator.Port())},
		},
		// Destination address guards, TLS and limits (internal/proxyconf's security model).
		"allowed_private_cidrs": schema.SetAttribute{
			Optional: true, Computed: true, ElementType: types.StringType,
			Default: setdefault.StaticValue(types.SetValueMust(types.StringType, []attr.Value{})),
			MarkdownDescription: "Private ranges the proxy may connect to after all, such as an internal package mirror, in canonical CIDR form inside " +
				"`" + strings.Join(proxyconf.PrivateRanges, "`, `") + "`. Loopback, link-local (the metadata server), unspecified and the proxy's own addresses stay refused. " +
				"Empty by default: every private range refused.",
			PlanModifiers: []planmodifier.Set{setRequiresReplaceUnlessReconfigurable()},
			Validators:    []validator.Set{setvalidator.SizeAtMost(proxyconf.MaxAllowedPrivateCIDRs), setvalidator.ValueStringsAre(attribute_validator.AllowedPrivateCIDR())},
		},
		"max_connections_per_client": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(proxyconf.DefaultMaxConnectionsPerClient),
			MarkdownDescription: fmt.Sprintf("Connections one client address may hold open; requests on more are refused with 403. Defaults to %d.", proxyconf.DefaultMaxConnectionsPerClient),
			PlanModifiers:       []planmodifier.Int64{int64RequiresReplaceUnlessReconfigurable()},
			Validators:          []validator.Int64{int64validator.Between(1, proxyconf.MaxMaxConnectionsPerClient)},
		},
		"labels": schema.MapAttribute{
			Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Labels on every object of the proxy; change in place. " + labelRulesDescription,
			Validators: []validator.Map{
				mapvalidator.KeysAre(attribute_validator.LabelKey()),
				mapvalidator.ValueStringsAre(attribute_validator.LabelValue()),
			},
		},
	}
}

// credentialAttributes are the proxy's TLS key pair and its users' credentials.
func credentialAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"tls": schema.SingleNestedAttribute{
			Optional: true,
			MarkdownDescription: "Serve the proxy port over TLS, so that credentials never cross the network in clear; `proxy_url` then starts with `https://`. " +
				"Set `private_key_pem`, or on CLIs that support write-only attributes `private_key_pem_wo` with `private_key_pem_wo_version` so the key is never stored in state. " +
				"Adding or removing `tls`, a new certificate or key, or a new `private_key_pem_wo_version` replaces the proxy; `client_ca_pem` and " +
				"`client_crl_pem` change in place where the backend can reconfigure the proxy.",
			PlanModifiers: []planmodifier.Object{requiresReplaceExcept("client_ca_pem", "client_crl_pem")},
			Validators:    []validator.Object{attribute_validator.TLSKeyPair()},
			Attributes: map[string]schema.Attribute{
				"certificate_pem": schema.StringAttribute{Required: true,
					MarkdownDescription: "The proxy's certificate in PEM, followed by any intermediate CA certificates."},
				"private_key_pem": schema.StringAttribute{Optional: true, Sensitive: true,
					MarkdownDescription: "The certificate's private key in PEM, unencrypted. Stored in state (marked sensitive).",
					Validators: []validator.String{
						stringvalidator.ExactlyOneOf(path.MatchRoot("tls").AtName("private_key_pem"), path.MatchRoot("tls").AtName("private_key_pem_wo"))}},
				"private_key_pem_wo": schema.StringAttribute{Optional: true, Sensitive: true, WriteOnly: true,
					MarkdownDescription: "Write-only private key in PEM, unencrypted: never stored in state. Change `private_key_pem_wo_version` to apply a new one.",
					Validators:          []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("tls").AtName("private_key_pem_wo_version"))}},
				"private_key_pem_wo_version": schema.Int64Attribute{Optional: true,
					MarkdownDescription: "Any number; changing it replaces the proxy with one that serves the current `private_key_pem_wo`.",
					Validators:          []validator.Int64{int64validator.AlsoRequires(path.MatchRoot("tls").AtName("private_key_pem_wo"))}},
				"client_ca_pem": schema.StringAttribute{Optional: true,
					MarkdownDescription: "CA certificates in PEM: when set, every client must present a certificate one of them signed, and rule sets may " +
						"match its subject (`clients.certificate_subjects`). Not secret, so stored in state as it is. " + reconfigurableDescription,
					PlanModifiers: []planmodifier.String{stringRequiresReplaceUnlessReconfigurable()},
					Validators:    []validator.String{attribute_validator.ClientCA()}},
				"client_crl_pem": schema.StringAttribute{Optional: true,
					MarkdownDescription: "Certificate revocation lists in PEM, from the CAs of `client_ca_pem`: a client certificate they list is refused. " +
						"Not secret, so stored in state as it is. " + reconfigurableDescription,
					PlanModifiers: []planmodifier.String{stringRequiresReplaceUnlessReconfigurable()},
					Validators: []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("tls").AtName("client_ca_pem")),
						attribute_validator.ClientCRL(path.MatchRoot("tls").AtName("client_ca_pem"))}},
			},
		},
		"auth": schema.SingleNestedAttribute{
			Optional: true,
			MarkdownDescription: "Require proxy basic authentication. For one user, set `username` with `password`, or on CLIs that support write-only attributes " +
				"`password_wo` with `password_wo_version` so the password is never stored in state. For several, set `users` instead: " +
				"each with a write-only password. Rule sets match users by name (`rule_sets[*].clients.users`). " + reconfigurableDescription,
			PlanModifiers: []planmodifier.Object{objectRequiresReplaceUnlessReconfigurable()},
			Attributes:    mergeAttributes(singleUserAttributes(), map[string]schema.Attribute{"users": usersAttribute()}),
		},
	}
}

// singleUserAttributes are auth's one user, the form it had before it took several (users).
func singleUserAttributes() map[string]schema.Attribute {
	passwordWO, users := path.MatchRoot("auth").AtName("password_wo"), path.MatchRoot("auth").AtName("users")
	return map[string]schema.Attribute{
		"username": schema.StringAttribute{Optional: true,
			MarkdownDescription: "The one user's name; set `users` instead for several.",
			Validators:          []validator.String{attribute_validator.Username(), stringvalidator.ExactlyOneOf(path.MatchRoot("auth").AtName("username"), users)}},
		"password": schema.StringAttribute{Optional: true, Sensitive: true,
			MarkdownDescription: "The password of `username`, 8 to 72 bytes. Stored in state (marked sensitive).",
			Validators: []validator.String{attribute_validator.Password(),
				stringvalidator.AtLeastOneOf(passwordWO, users), stringvalidator.ConflictsWith(passwordWO, users)}},
		"password_wo": schema.StringAttribute{Optional: true, Sensitive: true, WriteOnly: true,
			MarkdownDescription: "Write-only password of `username`, 8 to 72 bytes: never stored in state. Change `password_wo_version` to apply a new one.",
			Validators: []validator.String{attribute_validator.Password(),
				stringvalidator.AlsoRequires(path.MatchRoot("auth").AtName("password_wo_version")), stringvalidator.ConflictsWith(users)}},
		"password_wo_version": schema.Int64Attribute{Optional: true,
			MarkdownDescription: "Any number; changing it applies the current `password_wo`: in place where the proxy can be reconfigured, by replacement otherwise.",
			Validators:          []validator.Int64{int64validator.AlsoRequires(path.MatchRoot("auth").AtName("password_wo"))}},
	}
}

// computedAttributes are what the backend reports.
func computedAttributes() map[string]schema.Attribute {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	return map[string]schema.Attribute{
		// Computed.
		"id": schema.StringAttribute{
			Computed:            true,
			MarkdownDescription: "Provider ID, the import string: " + providerIDFormsMarkdown() + ".",
			PlanModifiers:       keep,
		},
		"uid": schema.StringAttribute{Computed: true, MarkdownDescription: "Unique ID written on every backend object; it is how garbage collection recognises them.", PlanModifiers: keep},
		"all_labels": schema.MapAttribute{Computed: true, ElementType: types.StringType,
			MarkdownDescription: "`labels` merged over the provider's `default_labels`: what the objects carry besides the provider's own bookkeeping labels."},
		// No UseStateForUnknown: a proxy's state moves by itself (a member lost, a rollout done), so an update
		// plans it unknown, and only a plan with nothing to change keeps it (keepVolatileOnNoOp).
		"state":            schema.StringAttribute{Computed: true, MarkdownDescription: "Lifecycle state: one of " + statesDescription() + "."},
		"internal_address": schema.StringAttribute{Computed: true, MarkdownDescription: "Address clients in the placement use to reach the proxy.", PlanModifiers: keep},
		"egress_address":   schema.StringAttribute{Computed: true, MarkdownDescription: egressAddressDescription(), PlanModifiers: []planmodifier.String{keepUnlessAddressMovesOf(backendDescriptors)}},
		"ingress_address":  schema.StringAttribute{Computed: true, MarkdownDescription: ingressAddressDescription(), PlanModifiers: keep},
		"proxy_url":        schema.StringAttribute{Computed: true, MarkdownDescription: "`http://<internal_address>:<port>` (`https://` with `tls`), for `HTTPS_PROXY` and `HTTP_PROXY`; on kubernetes the Service's DNS name `<name>.<namespace>.svc` stands for the address. Empty while the address is unknown.", PlanModifiers: keep},
		"created_at":       schema.StringAttribute{Computed: true, MarkdownDescription: "When the backend created the proxy (RFC 3339), as the backend reports it.", PlanModifiers: keep},
	}
}

// mergeAttributes joins attribute maps. A name in two of them is a mistake in the schema's code, which the
// schema tests meet at once.
func mergeAttributes(maps ...map[string]schema.Attribute) map[string]schema.Attribute {
	out := map[string]schema.Attribute{}
	for _, m := range maps {
		for name, a := range m {
			if _, twice := out[name]; twice {
				panic("egress_proxy schema: attribute " + name + " is defined twice")
			}
			out[name] = a
		}
	}
	return out
}
