package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
)

// privatePlannedDestroy marks, in the planned private state, a Delete that Terraform planned as a destroy.
//
// Both CLIs ask the provider to plan a destroy (the framework advertises PlanDestroy and calls ModifyPlan
// with a null plan) and hand the planned private state to Delete. The delete half of a replacement is planned
// as part of the replace change instead, and carries the prior private state, which never holds the mark:
// the mark is only ever written into a destroy plan, whose Delete removes the state it would be saved in.
// So a Delete without the mark is the first half of a replacement, or comes from a CLI that did not plan it;
// either way the backend keeps what a successor adopts (a reserved egress address) rather than lose it.
const privatePlannedDestroy = "planned_destroy"

func markPlannedDestroy(ctx context.Context, private privateWriter) diag.Diagnostics {
	if private == nil {
		return nil
	}
	return private.SetKey(ctx, privatePlannedDestroy, []byte("true"))
}

func plannedDestroy(ctx context.Context, private privateReader, diags *diag.Diagnostics) bool {
	if private == nil {
		return false
	}
	value, d := private.GetKey(ctx, privatePlannedDestroy)
	diags.Append(d...)
	return string(value) == "true"
}
