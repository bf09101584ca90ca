// Package backendtest is the conformance suite of the backend contract: one subtest per rule of the
// contract's methods (internal/backend/CONTRACT.md) that can be checked from outside a backend, run against
// every backend on its own fake (memory, the kvm fake host, client-go's fake clientset, the Compute fake), so
// a rule is proved once for all of them instead of once per package in its own words.
//
// It is a test helper imported by the backends' _test files, never by the provider.
package backendtest

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Harness is what the suite needs from one backend.
type Harness struct {
	// New returns a backend on a fresh fake world of its own, with the hooks into that world. Every subtest
	// calls it once, so subtests share nothing and may run side by side.
	New func(t *testing.T) World
	// Spec returns a valid spec named name, placed where the backends New returns can make it. The suite
	// sets UID, Owner and Labels itself, and may add credentials to Proxy.
	Spec func(name string) backend.Spec
	// IDForm is how the backend's ids look (its package's IDForm): every id it returns must parse by it.
	IDForm backend.IDForm
	// KnownFailures skips the named rules (the Rule constants) for this backend, each with the failure it is
	// known for, so that a rule the backend breaks is reported by name until it is fixed, not silently left
	// out. A skip is not a pass.
	KnownFailures map[string]string
}

// World is one backend and the hooks into the fake it runs against. A nil hook skips the rules that need it,
// naming the hook; a skip is not a pass.
type World struct {
	Backend backend.Backend
	// LoseNextAnswer makes the next Create's request take effect in the fake and its answer get lost on the
	// way back, as a dropped connection or a 503 after the fact does.
	LoseNextAnswer func(t *testing.T)
	// FailScope makes ListByTag fail to read one scope (a target, zone or namespace) other than the one Spec
	// places proxies in, while Spec's scope still answers.
	FailScope func(t *testing.T)
	// Foreign makes, where Spec(name) places a proxy, an object named name that the provider did not make
	// (no labels or metadata of its own), as a user makes one by hand.
	Foreign func(t *testing.T, name string)
	// RemoveForeign removes what Foreign made for name, as the user deletes their own object.
	RemoveForeign func(t *testing.T, name string)
	// NeverReady makes the next proxy Create makes exist in the fake but never become ready, so Create waits
	// until its context ends.
	NeverReady func(t *testing.T)
}

// Rules, by the subtest names that check them. Each names the rule, as the contract words it.
const (
	RuleCreateReturnsWhatGetReads = "Create returns the running proxy as Get reads it"
	RuleGetReadsBackIdentity      = "Get reads back ID, Name, UID, Owner, labels, placement and CreatedAt"
	RuleSettingsWithoutPassword   = "Get and ListByTag report the settings without the password"
	RuleGetNeverCreatedNotFound   = "Get of a proxy never created is NotFound"
	RuleDeleteThenNotFound        = "Delete then Get is NotFound and ListByTag leaves it out"
	RuleCreateAdoptsSameUID       = "Create again with the same name and UID adopts the proxy"
	RuleCreateAdoptsLostAnswer    = "Create retried after a lost answer adopts the proxy"
	RuleCreateRefusesOtherUID     = "Create of a taken name with another UID is refused as Permanent"
	RuleCreateRefusesUnplaceable  = "Create of a spec it cannot place is refused as Permanent"
	RuleCreateNotReadyReturnsID   = "Create that does not become ready returns the instance's ID with the error"
	RuleDeleteIdempotent          = "Delete of a missing proxy is success"
	RuleListOnlyOwners            = "ListByTag returns only the owner's proxies, each with CreatedAt"
	RuleListFailedScope           = "ListByTag reports a failed scope as a ListError beside what the others hold"
	RuleContextCreate             = "a cancelled context ends Create with its error"
	RuleContextGet                = "a cancelled context ends Get with its error"
	RuleContextUpdate             = "a cancelled context ends Update with its error"
	RuleContextReconfigure        = "a cancelled context ends Reconfigure with its error"
	RuleContextDelete             = "a cancelled context ends Delete with its error"
	RuleContextListByTag          = "a cancelled context ends ListByTag with its error"
	RuleUpdateLabels              = "Update changes the labels in place"
	RuleUpdateGoneNotFound        = "Update of a deleted proxy is NotFound"
	RuleReconfigureIdempotent     = "Reconfigure changes the rules and is idempotent"
	RuleReconfigureGoneNotFound   = "Reconfigure of a deleted proxy is NotFound"
	RuleForeignIsPermanent        = "an object the provider did not make is Permanent for Get, Delete and Create, and kept"
	RuleRefusedCreateGivesBack    = "a refused Create gives back what it made: the name is free once the other object is gone"
	RuleConcurrentUse             = "Create, ListByTag and Delete are safe side by side"
	RuleErrorsNameTheObject       = "SHOULD name the object in every error"
)

// rule is one subtest: its name and what it checks, on a world of its own.
type rule struct {
	name  string
	check func(s *suite)
}

var rules = []rule{
	{RuleCreateReturnsWhatGetReads, createReturnsWhatGetReads},
	{RuleGetReadsBackIdentity, getReadsBackIdentity},
	{RuleSettingsWithoutPassword, settingsWithoutPassword},
	{RuleGetNeverCreatedNotFound, getNeverCreatedNotFound},
	{RuleDeleteThenNotFound, deleteThenNotFound},
	{RuleCreateAdoptsSameUID, createAdoptsSameUID},
	{RuleCreateAdoptsLostAnswer, createAdoptsLostAnswer},
	{RuleCreateRefusesOtherUID, createRefusesOtherUID},
	{RuleCreateRefusesUnplaceable, createRefusesUnplaceable},
	{RuleCreateNotReadyReturnsID, createNotReadyReturnsID},
	{RuleDeleteIdempotent, deleteIdempotent},
	{RuleListOnlyOwners, listOnlyOwners},
	{RuleListFailedScope, listFailedScope},
	{RuleContextCreate, contextHonoured("Create")},
	{RuleContextGet, contextHonoured("Get")},
	{RuleContextUpdate, contextHonoured("Update")},
	{RuleContextReconfigure, contextHonoured("Reconfigure")},
	{RuleContextDelete, contextHonoured("Delete")},
	{RuleContextListByTag, contextHonoured("ListByTag")},
	{RuleUpdateLabels, updateLabels},
	{RuleUpdateGoneNotFound, updateGoneNotFound},
	{RuleReconfigureIdempotent, reconfigureIdempotent},
	{RuleReconfigureGoneNotFound, reconfigureGoneNotFound},
	{RuleForeignIsPermanent, foreignIsPermanent},
	{RuleRefusedCreateGivesBack, refusedCreateGivesBack},
	{RuleConcurrentUse, concurrentUse},
	{RuleErrorsNameTheObject, errorsNameTheObject},
}

// Run runs every rule as a subtest of t against the backends h makes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.Spec == nil || h.IDForm.Kind == "" {
		t.Fatal("backendtest.Harness needs New, Spec and IDForm")
	}
	known := map[string]bool{}
	for _, r := range rules {
		known[r.name] = true
	}
	for name := range h.KnownFailures {
		if !known[name] {
			t.Errorf("KnownFailures names %q, which is no rule of the suite", name)
		}
	}
	var uids atomic.Int64
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			if why, ok := h.KnownFailures[r.name]; ok {
				t.Skipf("known failure of this backend, not a pass: %s", why)
			}
			w := h.New(t)
			r.check(&suite{t: t, h: h, w: w, b: w.Backend, ctx: patience(t), uids: &uids})
		})
	}
}

// patience bounds every call of a subtest: generous, as the machine may be loaded, so that a call that never
// returns fails the subtest with a message instead of hanging until go test's own timeout.
func patience(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pollInterval spaces the reads of a subtest that waits for the fake to reach a state (an object made).
const pollInterval = 10 * time.Millisecond

// suite is one subtest's world and its helpers.
type suite struct {
	t    *testing.T
	h    Harness
	w    World
	b    backend.Backend
	ctx  context.Context
	uids *atomic.Int64
}

// spec is the harness's spec named name, of owner, with a UID no other spec of this run has.
func (s *suite) spec(name, owner string) backend.Spec {
	spec := s.h.Spec(name)
	spec.UID = fmt.Sprintf("conformance-uid-%d", s.uids.Add(1))
	spec.Owner = owner
	spec.Labels = map[string]string{"conformance": "a"}
	return spec
}

// need skips the subtest when the world lacks hook, naming it.
func (s *suite) need(hook string, present bool) {
	s.t.Helper()
	if !present {
		s.t.Skipf("the harness has no %s hook: rule not checked on this backend (a skip, not a pass)", hook)
	}
}

func (s *suite) create(spec backend.Spec) backend.Instance {
	s.t.Helper()
	inst, err := s.b.Create(s.ctx, spec)
	if err != nil {
		s.t.Fatalf("Create %s: %v", spec.Name, err)
	}
	if err := (backend.IDForms{s.h.IDForm}).Validate(inst.ID); err != nil {
		s.t.Fatalf("Create %s returned an invalid id %q: %v", spec.Name, inst.ID, err)
	}
	return inst
}

func (s *suite) get(id backend.ProviderID) backend.Instance {
	s.t.Helper()
	inst, err := s.b.Get(s.ctx, id)
	if err != nil {
		s.t.Fatalf("Get %s of a proxy that exists: %v", id, err)
	}
	return inst
}

func (s *suite) delete(id backend.ProviderID) {
	s.t.Helper()
	if err := s.b.Delete(s.ctx, id); err != nil {
		s.t.Fatalf("Delete %s: %v", id, err)
	}
}

// list is ListByTag of owner, which must not fail here: no scope was made to fail.
func (s *suite) list(owner string) []backend.Instance {
	s.t.Helper()
	insts, err := s.b.ListByTag(s.ctx, backend.Selector{Owner: owner})
	if err != nil {
		s.t.Fatalf("ListByTag %s: %v", owner, err)
	}
	return insts
}

// ids are the instances' ids, sorted, for messages and comparisons.
func ids(insts []backend.Instance) []string {
	out := make([]string, len(insts))
	for i, inst := range insts {
		out[i] = inst.ID.String()
	}
	sort.Strings(out)
	return out
}

// withName returns the listed instances named name.
func withName(insts []backend.Instance, name string) []backend.Instance {
	var out []backend.Instance
	for _, inst := range insts {
		if inst.Name == name {
			out = append(out, inst)
		}
	}
	return out
}

// promptly runs call and fails the subtest if it has not returned when the subtest's patience ends: a call
// given a cancelled context must not wait for anything.
func (s *suite) promptly(what string, call func() error) error {
	s.t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-s.ctx.Done():
		s.t.Fatalf("%s with a cancelled context had not returned after the subtest's patience ran out", what)
		return nil
	}
}
