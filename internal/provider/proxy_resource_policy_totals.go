package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// policyTotals refuses, at plan time, a configuration whose lists are each within their own bound but together
// exceed the proxy's (proxyconf.Settings.ValidatePolicyTotals): the destinations of allowed_destinations,
// denied_destinations and every rule set, and so on for client ranges, ports, certificate subjects and users.
// The backend would refuse the same at apply, after the plan was approved. A list not known yet leaves the
// check to the apply: its length is not known either.
type policyTotals struct{}

var _ resource.ConfigValidator = policyTotals{}

const policyTotalsDescription = "the destinations, client ranges, ports, certificate subjects and users of the proxy and all its rule sets together stay within the proxy's bounds"

func (policyTotals) Description(context.Context) string         { return policyTotalsDescription }
func (policyTotals) MarkdownDescription(context.Context) string { return policyTotalsDescription }

func (policyTotals) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var allowed, denied, clients, ports types.Set
	var list types.List
	for p, target := range map[string]any{
		"allowed_destinations": &allowed, "denied_destinations": &denied, "allowed_client_cidrs": &clients,
		"allowed_ports": &ports, "rule_sets": &list,
	} {
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root(p), target)...)
	}
	if resp.Diagnostics.HasError() || list.IsUnknown() {
		return
	}
	ruleSets, diags := ruleSetsOf(ctx, list)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	known := true
	// entries counts a set's elements, its default's where it is null (defaults are not in the configuration).
	entries := func(set types.Set, byDefault int) []string {
		switch {
		case set.IsUnknown() || !allSetKnown(set):
			known = false
			return nil
		case set.IsNull():
			return make([]string, byDefault)
		}
		return make([]string, len(set.Elements()))
	}
	portEntries := func(set types.Set) []int { return make([]int, len(entries(set, len(proxyconf.DefaultConnectPorts)))) }
	s := proxyconf.Settings{
		AllowedDestinations: entries(allowed, 0),
		DeniedDestinations:  entries(denied, 0),
		AllowedClientCIDRs:  entries(clients, 0),
		AllowedPorts:        portEntries(ports),
	}
	for _, r := range ruleSets {
		c, ok, d := r.clientsOf(ctx)
		resp.Diagnostics.Append(d...)
		if !ok && r.Clients.IsUnknown() {
			known = false
		}
		s.RuleSets = append(s.RuleSets, proxyconf.RuleSet{
			Destinations: entries(r.Destinations, 0),
			Ports:        portEntries(r.Ports),
			Clients: proxyconf.RuleSetClients{
				SourceCIDRs:         entries(c.SourceCIDRs, 0),
				Users:               entries(c.Users, 0),
				CertificateSubjects: entries(c.CertificateSubjects, 0),
			},
		})
	}
	if !known {
		return
	}
	if err := s.ValidatePolicyTotals(); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("rule_sets"), "Policy too large", fmt.Sprintf(
			"Attribute rule_sets: %v. Each list is within its own bound, but the proxy renders them all into one configuration: "+
				"merge rule sets that share destinations, or split the clients over two proxies.", err))
	}
}
