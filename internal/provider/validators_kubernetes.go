package provider

import (
	"context"
	"fmt"
	"sort"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// The kubernetes backend's checks of what a placement sets, which follow the API server's and the kubelet's
// rules: what would fail at apply, or never run, fails the plan.

// kubernetesImage accepts an image reference the kubelet can parse.
func kubernetesImage() validator.String {
	return attribute_validator.Func("image reference", kubernetes.ValidateImage)
}

// nodeSelectorKey accepts a Kubernetes label key.
func nodeSelectorKey() validator.String {
	return attribute_validator.Func("node selector label key", kubernetes.ValidateNodeSelectorKey)
}

// nodeSelectorValue accepts a Kubernetes label value.
func nodeSelectorValue() validator.String {
	return attribute_validator.Func("node selector label value", kubernetes.ValidateNodeSelectorValue)
}

const kubernetesResourceDescription = "kubernetes resource"

// kubernetesResources accepts a container's requests or limits: resources a container can ask for, each with
// a quantity the API server accepts for it.
func kubernetesResources() validator.Map {
	return attribute_validator.MapEntries(kubernetesResourceDescription, kubernetes.ValidateResource)
}

// kubernetesRequestsWithinLimits checks a resources object's requests against its limits, resource by
// resource; the error points at the request.
func kubernetesRequestsWithinLimits() validator.Object { return requestsWithinLimits{} }

type requestsWithinLimits struct{}

var _ validator.Object = requestsWithinLimits{}

const requestsWithinLimitsDescription = "no request exceeds its limit; huge pages and extended resources have a limit and request exactly it"

func (requestsWithinLimits) Description(context.Context) string {
	return requestsWithinLimitsDescription
}
func (requestsWithinLimits) MarkdownDescription(context.Context) string {
	return requestsWithinLimitsDescription
}

func (requestsWithinLimits) ValidateObject(_ context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	attrs := req.ConfigValue.Attributes()
	requests, _, _ := knownStrings(attrs["requests"])
	limits, limitsUnknown, someLimitsUnknown := knownStrings(attrs["limits"])
	names := make([]string, 0, len(requests))
	for name := range requests {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if limitsUnknown || someLimitsUnknown[name] {
			continue // its limit is known only at apply, where the backend checks the pair
		}
		if err := kubernetes.ValidateRequestWithinLimit(name, requests[name], limits[name]); err != nil {
			p := req.Path.AtName("requests").AtMapKey(name)
			resp.Diagnostics.AddAttributeError(p, "Invalid "+kubernetesResourceDescription, fmt.Sprintf("Attribute %s: %v", p, err))
		}
	}
}

// knownStrings is the known entries of a map of strings, whether the whole map is unknown, and the keys whose
// values are.
func knownStrings(v attr.Value) (known map[string]string, unknown bool, unknownKeys map[string]bool) {
	known, unknownKeys = map[string]string{}, map[string]bool{}
	m, ok := v.(types.Map)
	if !ok || m.IsNull() {
		return known, false, unknownKeys
	}
	if m.IsUnknown() {
		return known, true, unknownKeys
	}
	for k, e := range m.Elements() {
		s, ok := e.(types.String)
		switch {
		case ok && s.IsUnknown():
			unknownKeys[k] = true
		case ok && !s.IsNull():
			known[k] = s.ValueString()
		}
	}
	return known, false, unknownKeys
}
