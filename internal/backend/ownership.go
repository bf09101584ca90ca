package backend

import (
	"context"
	"fmt"
)

// Ownership is whose a proxy is: the owner of the provider configuration that manages it, and the proxy's
// UID. Names are not enough: two teams sharing a project, host or cluster may choose the same name, and a
// lookup by name alone would let one team's Delete remove, or its Create adopt, what the other made (an
// address a partner allow-lists, for one).
//
// Create reads it from the Spec. Get, Update, Reconfigure and Delete take a ProviderID, which says only where
// a proxy is (it is the import string, and an import knows no UID yet): the caller puts the ownership it
// expects on the context with WithOwnership, and the backend checks every object it reads back, adopts or
// deletes against it with Check before it touches it. A context without one checks nothing (a test driving a
// backend directly), and an empty field checks nothing of its kind (an import's Read has no UID yet).
type Ownership struct {
	Owner string
	UID   string
}

type ownershipKey struct{}

// WithOwnership returns ctx carrying o, the ownership the objects of the call must have.
func WithOwnership(ctx context.Context, o Ownership) context.Context {
	return context.WithValue(ctx, ownershipKey{}, o)
}

// OwnershipOf returns the ownership ctx carries, or the zero Ownership, which checks nothing.
func OwnershipOf(ctx context.Context) Ownership {
	o, _ := ctx.Value(ownershipKey{}).(Ownership)
	return o
}

// OwnershipOfSpec is the ownership a Create must find on any object it adopts.
func OwnershipOfSpec(spec Spec) Ownership { return Ownership{Owner: spec.Owner, UID: spec.UID} }

// Check returns nil when an object labelled with owner and uid may be touched under o, and otherwise a
// Permanent error about object naming both owners and both proxies, with what the user can do.
func (o Ownership) Check(object, owner, uid string) error {
	if (o.Owner == "" || o.Owner == owner) && (o.UID == "" || o.UID == uid) {
		return nil
	}
	return &Error{
		Class: ClassPermanent, Object: object,
		Err: fmt.Errorf("belongs to %s, not to this provider's owner %q (proxy %s): not touching it",
			describeOwner(owner, uid), o.Owner, orUnknown(o.UID)),
		Advice: "Another configuration manages an object of this name. Choose another name for this proxy; or, when the " +
			"object is no longer the other owner's, delete it there (or by hand), then apply again. " +
			"When this resource should no longer manage it, remove it from the state instead.",
	}
}

// Reading is the ownership a read checks: the owner alone. After a replacement killed between the old
// proxy's delete and the answer to its successor's create, the state still names the old UID while the
// successor, of the same owner and name, runs; reading it back lets the next plan converge on it (and keep its
// address), where refusing would leave the configuration unable to plan at all. Another owner's proxy is still
// refused, and Create, Update, Reconfigure and Delete still check the UID before they change anything.
func (o Ownership) Reading() Ownership { return Ownership{Owner: o.Owner} }

// Allows reports whether o lets an object labelled with owner and uid be touched: Check without the error,
// for a leftover found by name that is simply not this proxy's.
func (o Ownership) Allows(owner, uid string) bool { return o.Check("", owner, uid) == nil }

func describeOwner(owner, uid string) string {
	if owner == "" && uid == "" {
		return "something this provider did not make (no owner or UID on it)"
	}
	return fmt.Sprintf("owner %q (proxy %s)", owner, orUnknown(uid))
}

func orUnknown(uid string) string {
	if uid == "" {
		return "of unknown UID"
	}
	return uid
}
