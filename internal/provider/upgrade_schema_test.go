package provider

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// upgradeStateTypesFile records, for each managed resource, the schema version and the type of the state and of
// the identity as the upgrade baseline (testdata/upgrade-baseline) writes them. Regenerate it when the baseline
// moves: go test ./internal/provider -run TestStateTypesAgainstBaseline -update-state-types (CONTRIBUTING.md).
const upgradeStateTypesFile = "testdata/upgrade-baseline-state-types.json"

var updateStateTypes = flag.Bool("update-state-types", false, "record the resources' current state types as the baseline's, in "+upgradeStateTypesFile)

type recordedStateType struct {
	Version         int64           `json:"version"`
	State           json.RawMessage `json:"state"`
	IdentityVersion int64           `json:"identity_version"`
	Identity        json.RawMessage `json:"identity"`
}

// TestStateTypesAgainstBaseline: a state the baseline wrote must still decode under HEAD, which the CLI asks of
// the provider before anything else (UpgradeResourceState). The framework decodes a state of the schema's
// current version with the current type: an attribute added since is null, one removed is ignored, but one
// whose type changed (a string become a list, an attribute of a nested object retyped) fails every plan of
// every proxy. Such a change must bump the schema's Version and add an upgrader (ResourceWithUpgradeState)
// from each earlier version, whose PriorSchema reads the baseline's form; this test holds HEAD to that, without
// a CLI. The acceptance tests TestAccUpgrade_* prove the same through the baseline's own binary.
func TestStateTypesAgainstBaseline(t *testing.T) {
	ctx := t.Context()
	current := map[string]recordedStateType{}
	resources := map[string]resource.Resource{}
	for _, newResource := range (&egressProvider{}).Resources(ctx) {
		r := newResource()
		var meta resource.MetadataResponse
		r.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: "egress"}, &meta)
		var sch resource.SchemaResponse
		r.Schema(ctx, resource.SchemaRequest{}, &sch)
		rec := recordedStateType{Version: sch.Schema.Version}
		rec.State = mustMarshalType(t, sch.Schema.Type().TerraformType(ctx))
		if ri, ok := r.(resource.ResourceWithIdentity); ok {
			var id resource.IdentitySchemaResponse
			ri.IdentitySchema(ctx, resource.IdentitySchemaRequest{}, &id)
			rec.IdentityVersion = id.IdentitySchema.Version
			rec.Identity = mustMarshalType(t, id.IdentitySchema.Type().TerraformType(ctx))
		}
		current[meta.TypeName], resources[meta.TypeName] = rec, r
	}
	if *updateStateTypes {
		b, err := json.MarshalIndent(current, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(upgradeStateTypesFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %s", upgradeStateTypesFile)
		return
	}
	b, err := os.ReadFile(upgradeStateTypesFile)
	if err != nil {
		t.Fatal(err)
	}
	var baseline map[string]recordedStateType
	if err := json.Unmarshal(b, &baseline); err != nil {
		t.Fatalf("%s: %v", upgradeStateTypesFile, err)
	}
	for name, old := range baseline {
		cur, ok := current[name]
		if !ok {
			t.Errorf("%s: the baseline has this resource and HEAD does not: its users' states would fail to plan", name)
			continue
		}
		r := resources[name]
		checkStateType(t, name+" state", old.State, cur.State, old.Version, cur.Version, func() (map[int64]resource.StateUpgrader, bool) {
			u, ok := r.(resource.ResourceWithUpgradeState)
			if !ok {
				return nil, false
			}
			return u.UpgradeState(ctx), true
		})
		if old.Identity != nil || cur.Identity != nil {
			checkStateType(t, name+" identity", old.Identity, cur.Identity, old.IdentityVersion, cur.IdentityVersion, func() (map[int64]resource.StateUpgrader, bool) {
				u, ok := r.(resource.ResourceWithUpgradeIdentity)
				if !ok {
					return nil, false
				}
				// The identity's upgraders have a type of their own; what matters here is which versions they cover.
				out := map[int64]resource.StateUpgrader{}
				for v := range u.UpgradeIdentity(ctx) {
					out[v] = resource.StateUpgrader{}
				}
				return out, true
			})
		}
	}
}

// checkStateType holds what of one resource a CLI stores (its state, or its identity) to the rule above: the
// same version reads the baseline's type, or a later version has an upgrader from every earlier one.
func checkStateType(t *testing.T, what string, oldJSON, curJSON json.RawMessage, oldVersion, curVersion int64, upgraders func() (map[int64]resource.StateUpgrader, bool)) {
	t.Helper()
	oldType, curType := mustParseType(t, oldJSON), mustParseType(t, curJSON)
	switch {
	case curVersion < oldVersion:
		t.Errorf("%s: version %d is below the baseline's %d: a CLI refuses a state written by a newer schema version", what, curVersion, oldVersion)
	case curVersion == oldVersion:
		if problems := typeDecodes(oldType, curType, ""); len(problems) != 0 {
			t.Errorf("%s: a state the baseline wrote (version %d) no longer decodes: %v.\n"+
				"Bump the schema's Version and add an upgrader from every earlier version whose PriorSchema is the old form, "+
				"with a test from that form; or keep the old type.", what, oldVersion, problems)
		}
	default:
		have, ok := upgraders()
		if !ok {
			t.Errorf("%s: version %d, the baseline's %d, and no upgrader at all", what, curVersion, oldVersion)
			return
		}
		for v := range curVersion {
			if _, ok := have[v]; !ok {
				t.Errorf("%s: version %d has no upgrader from version %d (states of every earlier release may still be out there)", what, curVersion, v)
			}
		}
		if u, ok := have[oldVersion]; ok && u.PriorSchema != nil {
			prior := mustParseType(t, mustMarshalType(t, u.PriorSchema.Type().TerraformType(t.Context())))
			if !reflect.DeepEqual(prior, oldType) {
				t.Errorf("%s: the upgrader from version %d reads %s, not the baseline's form %s", what, oldVersion, typeString(prior), typeString(oldType))
			}
		}
	}
}

// typeDecodes lists why a value stored with type old would not decode as type cur: an attribute whose type
// changed, recursively through nested objects and collections. Attributes added (null when absent) and removed
// (ignored) decode. Both types are in the JSON form the plugin protocol gives them ("string", ["set","string"],
// ["object",{...}]), as the record keeps them.
func typeDecodes(old, cur any, at string) []string {
	if o, ok := old.([]any); ok && len(o) >= 2 {
		c, ok := cur.([]any)
		if !ok || len(c) < 2 || c[0] != o[0] {
			return []string{fmt.Sprintf("%s: %s became %s", orRoot(at), typeString(old), typeString(cur))}
		}
		switch o[0] {
		case "object":
			oAttrs, _ := o[1].(map[string]any)
			cAttrs, _ := c[1].(map[string]any)
			var problems []string
			for _, name := range slices.Sorted(maps.Keys(oAttrs)) {
				if ct, ok := cAttrs[name]; ok {
					problems = append(problems, typeDecodes(oAttrs[name], ct, at+"."+name)...)
				}
			}
			return problems
		case "list", "set":
			return typeDecodes(o[1], c[1], at+"[]")
		case "map":
			return typeDecodes(o[1], c[1], at+"{}")
		}
	}
	if reflect.DeepEqual(old, cur) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %s became %s", orRoot(at), typeString(old), typeString(cur))}
}

func typeString(typ any) string {
	b, _ := json.Marshal(typ)
	return string(b)
}

func orRoot(at string) string {
	if at == "" {
		return "the whole"
	}
	return at[1:]
}

func mustMarshalType(t *testing.T, typ tftypes.Type) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(typ)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParseType(t *testing.T, b json.RawMessage) any {
	t.Helper()
	var typ any
	if err := json.Unmarshal(b, &typ); err != nil {
		t.Fatalf("%s: %v", upgradeStateTypesFile, err)
	}
	return typ
}
