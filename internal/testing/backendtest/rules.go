package backendtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Owners of the suite's proxies: label values valid on every backend.
const (
	ownerA = "conformance-a"
	ownerB = "conformance-b"
)

// createReturnsWhatGetReads: Create returns once the proxy runs, reading the result back as Get would, with
// Reconfigurable set as Get sets it. Why: the plan after an apply must be empty, so Create's result must
// equal the next Read's.
func createReturnsWhatGetReads(s *suite) {
	spec := s.spec("conf-create", ownerA)
	created := s.create(spec)
	if created.State != backend.StateRunning {
		s.t.Errorf("Create returned state %s, want %s: Create must return only once the proxy runs", created.State, backend.StateRunning)
	}
	got := s.get(created.ID)
	if diff := differences(created, got); len(diff) > 0 {
		s.t.Errorf("Create's result differs from Get's in %v:\ncreate: %+v\nget:    %+v", diff, created, got)
	}
}

// differences names the fields of an Instance the provider keeps in state that differ between a and b.
func differences(a, b backend.Instance) []string {
	var out []string
	field := func(name string, equal bool) {
		if !equal {
			out = append(out, name)
		}
	}
	field("ID", a.ID == b.ID)
	field("Name", a.Name == b.Name)
	field("UID", a.UID == b.UID)
	field("Owner", a.Owner == b.Owner)
	field("Labels", maps(a.Labels, b.Labels))
	field("State", a.State == b.State)
	field("InternalAddress", a.InternalAddress == b.InternalAddress)
	field("EgressAddress", a.EgressAddress == b.EgressAddress)
	field("IngressAddress", a.IngressAddress == b.IngressAddress)
	field("InternalName", a.InternalName == b.InternalName)
	field("Port", a.Port == b.Port)
	field("CreatedAt", a.CreatedAt.Equal(b.CreatedAt))
	field("Placement", reflect.DeepEqual(a.Placement, b.Placement))
	field("Proxy", reflect.DeepEqual(a.Proxy, b.Proxy))
	field("Reconfigurable", a.Reconfigurable == b.Reconfigurable)
	return out
}

// maps compares label maps, nil and empty alike.
func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// getReadsBackIdentity: Get reads UID, CreatedAt, labels and placement back from the backend. Why: import
// starts from an id alone and fills the whole state from Get.
func getReadsBackIdentity(s *suite) {
	spec := s.spec("conf-read", ownerA)
	created := s.create(spec)
	got := s.get(created.ID)
	if got.ID != created.ID || got.Name != spec.Name || got.UID != spec.UID || got.Owner != spec.Owner {
		s.t.Errorf("Get = id %s name %q uid %q owner %q, want id %s name %q uid %q owner %q",
			got.ID, got.Name, got.UID, got.Owner, created.ID, spec.Name, spec.UID, spec.Owner)
	}
	if got.CreatedAt.IsZero() {
		s.t.Error("Get returned a zero CreatedAt")
	}
	if !maps(got.Labels, spec.Labels) {
		s.t.Errorf("Get read back labels %v, want the spec's %v (without the provider's own)", got.Labels, spec.Labels)
	}
	p := got.Placement
	if p.Backend != spec.Placement.Backend || p.Target != spec.Placement.Target || p.Scope != spec.Placement.Scope {
		s.t.Errorf("Get read back placement %s/%s/%s, want %s/%s/%s", p.Backend, p.Target, p.Scope,
			spec.Placement.Backend, spec.Placement.Target, spec.Placement.Scope)
	}
	if got.ID.Backend != spec.Placement.Backend || got.ID.Target != spec.Placement.Target || got.ID.Name != spec.Name {
		s.t.Errorf("id %s does not name the spec's placement and name", got.ID)
	}
	if !slices.Contains(backend.States, got.State) {
		s.t.Errorf("Get state %q is none of backend.States", got.State)
	}
	if got.Proxy != nil && (got.Proxy.Port != spec.Proxy.Port ||
		!slices.Equal(got.Proxy.AllowedDestinations, spec.Proxy.AllowedDestinations) ||
		!slices.Equal(got.Proxy.AllowedClientCIDRs, spec.Proxy.AllowedClientCIDRs)) {
		s.t.Errorf("Get read back settings %+v, want the spec's %+v", *got.Proxy, spec.Proxy)
	}
}

const (
	secretPassword       = "conformance-secret-password"
	secondSecretPassword = "conformance-second-password"
)

// settingsWithoutPassword: the settings an Instance carries are the stored ones with every user's name and
// no password. Why: what Get and ListByTag return reaches state and the list resource's generated
// configuration, and a user whose name is not read back would show as a change nobody made.
func settingsWithoutPassword(s *suite) {
	spec := s.spec("conf-secret", ownerA)
	spec.Proxy.Users = []proxyconf.BasicAuth{
		{Username: "conformance", Password: secretPassword},
		{Username: "conformance-2", Password: secondSecretPassword},
	}
	created := s.create(spec)
	check := func(what string, inst backend.Instance) {
		if inst.Proxy == nil {
			return
		}
		for _, u := range inst.Proxy.Users {
			if u.Password != "" {
				s.t.Errorf("%s returned user %s's password in Proxy.Users", what, u.Username)
			}
		}
		if got, want := proxyconf.Usernames(inst.Proxy.Users), proxyconf.Usernames(spec.Proxy.Users); !slices.Equal(got, want) {
			s.t.Errorf("%s returned users %q, want %q", what, got, want)
		}
		text := fmt.Sprintf("%+v %+v", inst, inst.Proxy)
		if strings.Contains(text, secretPassword) || strings.Contains(text, secondSecretPassword) {
			s.t.Errorf("%s returned a password somewhere in the instance: %s", what, text)
		}
	}
	check("Create", created)
	check("Get", s.get(created.ID))
	for _, inst := range s.list(ownerA) {
		check("ListByTag", inst)
	}
}

// idFor is the id a proxy of spec would have, made by the backend from a real one: the suite does not know
// how a backend spells its ids, so it renames one it made.
func idFor(made backend.ProviderID, name string) backend.ProviderID {
	made.Name = name
	return made
}

// getNeverCreatedNotFound: NotFound when the proxy is gone, here never made; and, for one that exists,
// nothing of the kind. Why: NotFound removes the resource from state.
func getNeverCreatedNotFound(s *suite) {
	made := s.create(s.spec("conf-here", ownerA))
	_, err := s.b.Get(s.ctx, idFor(made.ID, "conf-never-made"))
	if !backend.IsNotFound(err) {
		s.t.Errorf("Get of a proxy never created = %v (class %s), want NotFound", err, backend.ClassOf(err))
	}
	s.get(made.ID)
}

// deleteThenNotFound: after Delete, Get is NotFound and ListByTag lists it no more, while a proxy beside it
// stays. Why: Delete must remove everything and return once it is gone.
func deleteThenNotFound(s *suite) {
	gone := s.create(s.spec("conf-gone", ownerA))
	kept := s.create(s.spec("conf-kept", ownerA))
	s.delete(gone.ID)
	if _, err := s.b.Get(s.ctx, gone.ID); !backend.IsNotFound(err) {
		s.t.Errorf("Get after Delete = %v (class %s), want NotFound", err, backend.ClassOf(err))
	}
	listed := s.list(ownerA)
	if len(withName(listed, gone.Name)) != 0 {
		s.t.Errorf("ListByTag after Delete still lists %s: %v", gone.ID, ids(listed))
	}
	if len(withName(listed, kept.Name)) != 1 {
		s.t.Errorf("ListByTag after deleting another proxy lists %v, want %s once", ids(listed), kept.ID)
	}
	s.get(kept.ID)
}

// createAdoptsSameUID: a Create repeated with the same spec, as the provider's retry after a lost answer
// does, returns the same proxy and makes no second one.
func createAdoptsSameUID(s *suite) {
	spec := s.spec("conf-adopt", ownerA)
	first := s.create(spec)
	again := s.create(spec)
	if again.ID != first.ID || again.UID != spec.UID || !again.CreatedAt.Equal(first.CreatedAt) {
		s.t.Errorf("second Create = id %s uid %q created %v, want the first's: id %s uid %q created %v",
			again.ID, again.UID, again.CreatedAt, first.ID, spec.UID, first.CreatedAt)
	}
	if listed := s.list(ownerA); len(listed) != 1 || listed[0].ID != first.ID {
		s.t.Errorf("ListByTag after two Creates of one spec = %v, want only %s", ids(listed), first.ID)
	}
}

// createAdoptsLostAnswer: the backend made the proxy but its answer was lost; the provider's retry (Create
// under backend.Retry) must end with that one proxy, not two, nor a refusal of its own object.
func createAdoptsLostAnswer(s *suite) {
	s.need("LoseNextAnswer", s.w.LoseNextAnswer != nil)
	spec := s.spec("conf-lost", ownerA)
	s.w.LoseNextAnswer(s.t)
	var inst backend.Instance
	attempts := 0
	err := backend.Retry(s.ctx, backend.DefaultBackoff, func(ctx context.Context) error {
		attempts++
		var err error
		inst, err = s.b.Create(ctx, spec)
		return err
	})
	if err != nil {
		s.t.Fatalf("Create under Retry after a lost answer: %v (class %s) after %d attempts", err, backend.ClassOf(err), attempts)
	}
	if inst.UID != spec.UID || inst.Name != spec.Name {
		s.t.Errorf("Create after a lost answer = name %q uid %q, want %q %q", inst.Name, inst.UID, spec.Name, spec.UID)
	}
	if listed := s.list(ownerA); len(listed) != 1 || listed[0].ID != inst.ID {
		s.t.Errorf("ListByTag after a lost answer = %v, want only %s", ids(listed), inst.ID)
	}
	s.get(inst.ID)
}

// createRefusesOtherUID: a name taken by another proxy (another UID) is refused as Permanent, not adopted,
// and the first proxy stays as it was. Why: a retry must not take over an object someone else owns.
func createRefusesOtherUID(s *suite) {
	first := s.spec("conf-taken", ownerA)
	made := s.create(first)
	other := s.spec("conf-taken", ownerA)
	inst, err := s.b.Create(s.ctx, other)
	if err == nil {
		s.t.Fatalf("Create of %s with another UID succeeded (%+v), want a Permanent refusal", other.Name, inst)
	}
	if backend.ClassOf(err) != backend.ClassPermanent {
		s.t.Errorf("Create with another UID = %v (class %s), want Permanent", err, backend.ClassOf(err))
	}
	if got := s.get(made.ID); got.UID != first.UID {
		s.t.Errorf("after the refusal, Get reads uid %q, want the first proxy's %q", got.UID, first.UID)
	}
}

// createRefusesUnplaceable: a placement on a target the backend does not serve cannot pass on retry: it is
// Permanent, and nothing is made.
func createRefusesUnplaceable(s *suite) {
	spec := s.spec("conf-nowhere", ownerA)
	spec.Placement.Target = "conformance-no-such-target"
	_, err := s.b.Create(s.ctx, spec)
	if backend.ClassOf(err) != backend.ClassPermanent {
		s.t.Errorf("Create on an unknown target = %v (class %s), want Permanent", err, backend.ClassOf(err))
	}
	if listed := s.list(ownerA); len(listed) != 0 {
		s.t.Errorf("ListByTag after a refused Create = %v, want nothing", ids(listed))
	}
}

// createNotReadyReturnsID: once the object exists but does not become ready, Create returns the Instance
// with its ID together with the error, so the provider saves it as tainted instead of leaking it (or, when
// it returns none, leaves nothing behind).
func createNotReadyReturnsID(s *suite) {
	s.need("NeverReady", s.w.NeverReady != nil)
	spec := s.spec("conf-unready", ownerA)
	s.w.NeverReady(s.t)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	type result struct {
		inst backend.Instance
		err  error
	}
	done := make(chan result, 1)
	go func() {
		inst, err := s.b.Create(ctx, spec)
		done <- result{inst, err}
	}()
	// The create's timeout ends once the proxy is there to be found and not ready (Pending), as a resource's
	// timeout ends during a rollout that never finishes: by the state of the world, not a guessed duration.
	var listed []backend.Instance
	err := backend.Poll(s.ctx, pollInterval, func(ctx context.Context) (bool, error) {
		select {
		case r := <-done:
			return false, backend.Permanent("", "Create returned before its proxy was ready: %+v, %v", r.inst, r.err)
		default:
		}
		all, err := s.b.ListByTag(ctx, backend.Selector{Owner: ownerA})
		listed = withName(all, spec.Name)
		return len(listed) == 1 && listed[0].State == backend.StatePending, err
	})
	if err != nil {
		s.t.Fatalf("waiting for the proxy to be listed as %s: %v (listed: %+v)", backend.StatePending, err, listed)
	}
	cancel()
	var r result
	select {
	case r = <-done:
	case <-s.ctx.Done():
		s.t.Fatal("Create did not return after its context was cancelled")
	}
	if r.err == nil {
		s.t.Fatalf("Create of a proxy that never became ready succeeded: %+v", r.inst)
	}
	if !errors.Is(r.err, context.Canceled) {
		s.t.Errorf("Create's error %v does not wrap the context's", r.err)
	}
	if r.inst.ID == listed[0].ID {
		return
	}
	// No id: then nothing may be left, or it leaks unrecorded.
	if left := withName(s.list(ownerA), spec.Name); len(left) != 0 {
		s.t.Errorf("Create returned id %q with its error and left %v: want the proxy's id, so that it is recorded, not leaked", r.inst.ID, ids(left))
	}
}

// deleteIdempotent: a missing proxy, deleted before or never made, is success. Why: destroy after drift and
// a retried delete after a lost answer must finish.
func deleteIdempotent(s *suite) {
	made := s.create(s.spec("conf-twice", ownerA))
	s.delete(made.ID)
	if err := s.b.Delete(s.ctx, made.ID); err != nil {
		s.t.Errorf("second Delete of %s = %v, want nil", made.ID, err)
	}
	never := idFor(made.ID, "conf-never-made")
	if err := s.b.Delete(s.ctx, never); err != nil {
		s.t.Errorf("Delete of %s, never created = %v, want nil", never, err)
	}
}

// listOnlyOwners: ListByTag returns the proxies of sel.Owner and no other's, each with CreatedAt. Why: the
// orphan list subtracts state from it, and min_age reads CreatedAt.
func listOnlyOwners(s *suite) {
	a1 := s.create(s.spec("conf-a1", ownerA))
	a2 := s.create(s.spec("conf-a2", ownerA))
	b1 := s.create(s.spec("conf-b1", ownerB))
	for owner, want := range map[string][]backend.Instance{ownerA: {a1, a2}, ownerB: {b1}, "conformance-nobody": nil} {
		listed := s.list(owner)
		if got, wantIDs := ids(listed), ids(want); !slices.Equal(got, wantIDs) {
			s.t.Errorf("ListByTag %s = %v, want %v", owner, got, wantIDs)
		}
		for _, inst := range listed {
			if inst.Owner != owner || inst.CreatedAt.IsZero() {
				s.t.Errorf("ListByTag %s listed %s with owner %q and CreatedAt %v, want the owner and a CreatedAt", owner, inst.ID, inst.Owner, inst.CreatedAt)
			}
		}
	}
}

// listFailedScope: when a scope fails, ListByTag returns what the others hold together with a *ListError
// naming each failed scope. Why: the data source reports a partial list as incomplete instead of seeing
// nothing.
func listFailedScope(s *suite) {
	s.need("FailScope", s.w.FailScope != nil)
	made := s.create(s.spec("conf-listed", ownerA))
	s.w.FailScope(s.t)
	listed, err := s.b.ListByTag(s.ctx, backend.Selector{Owner: ownerA})
	var le *backend.ListError
	if !errors.As(err, &le) {
		s.t.Fatalf("ListByTag with a failing scope = %v (%T), want a *backend.ListError", err, err)
	}
	if len(le.Failed) == 0 {
		s.t.Error("the ListError names no failed scope")
	}
	for _, f := range le.Failed {
		if f.Scope == "" || f.Err == nil || f.Backend != made.ID.Backend {
			s.t.Errorf("failed scope %+v: want the backend %s, a scope and its error", f, made.ID.Backend)
		}
	}
	if got := withName(listed, made.Name); len(got) != 1 || got[0].ID != made.ID {
		s.t.Errorf("ListByTag with a failing scope listed %v, want %s from the scope that answered", ids(listed), made.ID)
	}
}

// contextHonoured: method, given a cancelled context, returns without waiting an error wrapping ctx.Err(),
// and does nothing. Why: Ctrl-C and the resource's timeouts cancel the context; a call that ignores it hangs
// the CLI, or goes on changing what the user meant to stop.
func contextHonoured(method string) func(s *suite) {
	return func(s *suite) {
		spec := s.spec("conf-ctx", ownerA)
		made := s.create(spec)
		cancelled, cancel := context.WithCancel(s.ctx)
		cancel()
		r, reconfigurer := s.b.(backend.Reconfigurer)
		// Each call runs on a goroutine of its own (see promptly): it reports, never fails the test itself.
		calls := map[string]func() error{
			"Create":      func() error { _, err := s.b.Create(cancelled, s.spec("conf-ctx-new", ownerA)); return err },
			"Get":         func() error { _, err := s.b.Get(cancelled, made.ID); return err },
			"Update":      func() error { _, err := s.b.Update(cancelled, made.ID, spec); return err },
			"Reconfigure": func() error { _, err := r.Reconfigure(cancelled, made.ID, reconfigured(spec)); return err },
			"Delete":      func() error { return s.b.Delete(cancelled, made.ID) },
			"ListByTag": func() error {
				_, err := s.b.ListByTag(cancelled, backend.Selector{Owner: ownerA})
				return err
			},
		}
		if method == "Reconfigure" && !reconfigurer {
			s.t.Skip("the backend does not implement backend.Reconfigurer: the decorator refuses for it")
		}
		if err := s.promptly(method, calls[method]); !errors.Is(err, context.Canceled) {
			s.t.Errorf("%s with a cancelled context = %v, want an error wrapping context.Canceled", method, err)
		}
		// Nothing was done: the proxy is still there, nothing new was made.
		if listed := s.list(ownerA); !slices.Equal(ids(listed), []string{made.ID.String()}) {
			s.t.Errorf("after %s with a cancelled context, ListByTag = %v, want only %s as before", method, ids(listed), made.ID)
		}
	}
}

// updateLabels: Update changes the labels in place: same proxy, new labels read back. Why: a label change
// must not replace a proxy.
func updateLabels(s *suite) {
	spec := s.spec("conf-labels", ownerA)
	made := s.create(spec)
	spec.Labels = map[string]string{"conformance": "b", "extra": "x"}
	updated, err := s.b.Update(s.ctx, made.ID, spec)
	if err != nil {
		s.t.Fatalf("Update of the labels: %v", err)
	}
	got := s.get(made.ID)
	for what, inst := range map[string]backend.Instance{"Update": updated, "Get": got} {
		if !maps(inst.Labels, spec.Labels) {
			s.t.Errorf("%s after the update reads labels %v, want %v", what, inst.Labels, spec.Labels)
		}
		if inst.ID != made.ID || inst.UID != spec.UID || !inst.CreatedAt.Equal(made.CreatedAt) {
			s.t.Errorf("%s after the update = id %s uid %q created %v, want the same proxy (%s %q %v)",
				what, inst.ID, inst.UID, inst.CreatedAt, made.ID, spec.UID, made.CreatedAt)
		}
	}
}

// updateGoneNotFound: Update of a proxy that is gone is NotFound, so the provider drops it from state.
func updateGoneNotFound(s *suite) {
	spec := s.spec("conf-update-gone", ownerA)
	made := s.create(spec)
	s.delete(made.ID)
	if _, err := s.b.Update(s.ctx, made.ID, spec); !backend.IsNotFound(err) {
		s.t.Errorf("Update of a deleted proxy = %v (class %s), want NotFound", err, backend.ClassOf(err))
	}
}

// reconfigured are settings unlike the spec's, on its port (which never changes in place).
func reconfigured(spec backend.Spec) proxyconf.Settings {
	next := spec.Proxy
	next.AllowedDestinations = []string{"conformance.example.org"}
	next.AllowedClientCIDRs = []string{"192.168.0.0/16"}
	return next
}

// reconfigureIdempotent: Reconfigure makes the proxy enforce the new rules, and the same settings twice is no
// error. Why: the provider calls it inside backend.Retry.
func reconfigureIdempotent(s *suite) {
	r, ok := s.b.(backend.Reconfigurer)
	if !ok {
		s.t.Skip("the backend does not implement backend.Reconfigurer: the decorator refuses for it")
	}
	spec := s.spec("conf-rules", ownerA)
	made := s.create(spec)
	if !made.Reconfigurable {
		s.t.Skipf("%s is not Reconfigurable on this fake: Reconfigure would be refused, rightly", made.ID)
	}
	next := reconfigured(spec)
	for i := range 2 {
		inst, err := r.Reconfigure(s.ctx, made.ID, next)
		if err != nil {
			s.t.Fatalf("Reconfigure #%d with the same settings: %v", i+1, err)
		}
		for what, inst := range map[string]backend.Instance{fmt.Sprintf("Reconfigure #%d", i+1): inst, "Get": s.get(made.ID)} {
			if inst.ID != made.ID || inst.UID != spec.UID {
				s.t.Errorf("%s = id %s uid %q, want the same proxy %s %q", what, inst.ID, inst.UID, made.ID, spec.UID)
			}
			if inst.Proxy == nil {
				continue // the backend cannot read its settings back: nothing to compare
			}
			if !slices.Equal(inst.Proxy.AllowedDestinations, next.AllowedDestinations) || !slices.Equal(inst.Proxy.AllowedClientCIDRs, next.AllowedClientCIDRs) {
				s.t.Errorf("%s reads destinations %v and clients %v, want %v and %v", what,
					inst.Proxy.AllowedDestinations, inst.Proxy.AllowedClientCIDRs, next.AllowedDestinations, next.AllowedClientCIDRs)
			}
		}
	}
}

// reconfigureGoneNotFound: Reconfigure of a proxy that is gone is NotFound.
func reconfigureGoneNotFound(s *suite) {
	r, ok := s.b.(backend.Reconfigurer)
	if !ok {
		s.t.Skip("the backend does not implement backend.Reconfigurer: the decorator refuses for it")
	}
	spec := s.spec("conf-rules-gone", ownerA)
	made := s.create(spec)
	s.delete(made.ID)
	if _, err := r.Reconfigure(s.ctx, made.ID, reconfigured(spec)); !backend.IsNotFound(err) {
		s.t.Errorf("Reconfigure of a deleted proxy = %v (class %s), want NotFound", err, backend.ClassOf(err))
	}
}

// foreignIsPermanent: an object of the proxy's name that the provider did not make is never NotFound (the
// next apply would create over it), never deleted, never adopted: Permanent for Get, Delete and Create.
func foreignIsPermanent(s *suite) {
	s.need("Foreign", s.w.Foreign != nil)
	made := s.create(s.spec("conf-mine", ownerA))
	spec := s.spec("conf-theirs", ownerA)
	s.w.Foreign(s.t, spec.Name)
	id := idFor(made.ID, spec.Name)
	if _, err := s.b.Get(s.ctx, id); backend.ClassOf(err) != backend.ClassPermanent {
		s.t.Errorf("Get of a foreign object = %v (class %s), want Permanent", err, backend.ClassOf(err))
	}
	if err := s.b.Delete(s.ctx, id); backend.ClassOf(err) != backend.ClassPermanent {
		s.t.Errorf("Delete of a foreign object = %v (class %s), want Permanent", err, backend.ClassOf(err))
	}
	if _, err := s.b.Create(s.ctx, spec); backend.ClassOf(err) != backend.ClassPermanent {
		s.t.Errorf("Create over a foreign object = %v (class %s), want Permanent", err, backend.ClassOf(err))
	}
	// Still there and still not ours: Get still refuses rather than calling it gone.
	if _, err := s.b.Get(s.ctx, id); backend.ClassOf(err) != backend.ClassPermanent {
		s.t.Errorf("Get of the foreign object after Delete and Create = %v (class %s), want Permanent: it must be kept", err, backend.ClassOf(err))
	}
	if listed := s.list(ownerA); !slices.Equal(ids(listed), []string{made.ID.String()}) {
		s.t.Errorf("ListByTag = %v, want only %s: a foreign object is never listed", ids(listed), made.ID)
	}
}

// refusedCreateGivesBack: a Create refused over an object the provider did not make leaves nothing of its
// own behind (a config object made before meeting the other object would belong to no proxy, be listed
// nowhere, and refuse the next Create of the name as "another proxy's"), so once the user removes their
// object, a proxy of that name with another UID can be made.
func refusedCreateGivesBack(s *suite) {
	s.need("Foreign", s.w.Foreign != nil)
	s.need("RemoveForeign", s.w.RemoveForeign != nil)
	refused := s.spec("conf-taken", ownerA)
	refused.Proxy.Users = []proxyconf.BasicAuth{{Username: "conformance", Password: secretPassword}}
	s.w.Foreign(s.t, refused.Name)
	if _, err := s.b.Create(s.ctx, refused); backend.ClassOf(err) != backend.ClassPermanent {
		s.t.Fatalf("Create over a foreign object = %v (class %s), want Permanent", err, backend.ClassOf(err))
	}
	s.w.RemoveForeign(s.t, refused.Name)
	next := s.spec(refused.Name, ownerA)
	made := s.create(next)
	if made.UID != next.UID {
		s.t.Errorf("Create after the foreign object went = UID %q, want the new proxy's %q", made.UID, next.UID)
	}
	if err := s.b.Delete(s.ctx, made.ID); err != nil {
		s.t.Errorf("Delete: %v", err)
	}
}

// concurrentUse: one Backend serves Terraform's parallel operations, so creates, lists and deletes run side
// by side (under the race detector in make test) and each proxy ends as if alone.
func concurrentUse(s *suite) {
	const n = 4
	specs := make([]backend.Spec, n)
	made := make([]backend.Instance, n)
	errs := make([]error, n)
	for i := range specs {
		specs[i] = s.spec(fmt.Sprintf("conf-par-%d", i), ownerA)
	}
	side := func(op func(i int) error) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { errs[i] = op(i) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				s.t.Fatalf("%s: %v", specs[i].Name, err)
			}
		}
	}
	side(func(i int) (err error) {
		made[i], err = s.b.Create(s.ctx, specs[i])
		if err == nil {
			_, err = s.b.ListByTag(s.ctx, backend.Selector{Owner: ownerA})
		}
		return err
	})
	if listed := s.list(ownerA); len(listed) != n {
		s.t.Errorf("ListByTag after %d side-by-side Creates = %v", n, ids(listed))
	}
	side(func(i int) error { return s.b.Delete(s.ctx, made[i].ID) })
	if listed := s.list(ownerA); len(listed) != 0 {
		s.t.Errorf("ListByTag after %d side-by-side Deletes = %v, want nothing", n, ids(listed))
	}
}

// errorsNameTheObject: the errors of the contract's refusals and lookups carry the object's name, as the
// user finds it in the backend's own tools. Why: the diagnostic shows it beside the provider id.
func errorsNameTheObject(s *suite) {
	first := s.spec("conf-named", ownerA)
	made := s.create(first)
	_, notFound := s.b.Get(s.ctx, idFor(made.ID, "conf-never-made"))
	_, refused := s.b.Create(s.ctx, s.spec("conf-named", ownerA))
	for what, err := range map[string]error{"Get of a missing proxy": notFound, "Create with another UID": refused} {
		var e *backend.Error
		if !errors.As(err, &e) || e.Object == "" {
			s.t.Errorf("%s = %v: no classified error naming its object", what, err)
		}
	}
}
