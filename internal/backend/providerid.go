package backend

import (
	"fmt"
	"strings"
)

// ProviderID finds an instance again with nothing but itself: no provider-level default is needed to read it.
// Its string form is the resource's id and import string: the kind, the target, the scope where the backend's
// ids have one, and the name, joined by slashes (each backend's IDForm says which parts it has).
type ProviderID struct {
	Backend Kind
	// Target is the cluster, project or host.
	Target string
	// Scope is the namespace or zone; empty where the backend's ids have no such part.
	Scope string
	Name  string
}

// IDForm is how the ids of one backend kind look. Each backend package declares its own, and the provider
// parses ids with the forms of the backends it registers, so that this package names no backend.
type IDForm struct {
	Kind Kind
	// Parts names the parts after the kind, as documentation shows them: the target, the scope when the
	// backend's ids have one, and the name. Two or three parts.
	Parts []string
}

// scoped says whether ids of this form have a scope part.
func (f IDForm) scoped() bool { return len(f.Parts) == 3 }

// String is the form as documentation shows it, such as kvm/<host>/<name>.
func (f IDForm) String() string {
	parts := []string{string(f.Kind)}
	for _, p := range f.Parts {
		parts = append(parts, "<"+p+">")
	}
	return strings.Join(parts, "/")
}

// IDForms are the forms a provider accepts, in the order its documentation lists the backends.
type IDForms []IDForm

// Strings gives each form's String, in order.
func (fs IDForms) Strings() []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.String()
	}
	return out
}

// String describes the accepted forms in one line of text: "a, b or c".
func (fs IDForms) String() string { return joinOr(fs.Strings()) }

// kinds describes the accepted beginnings: "kubernetes/, gcp/ or kvm/".
func (fs IDForms) kinds() string {
	k := make([]string, len(fs))
	for i, f := range fs {
		k[i] = string(f.Kind) + "/"
	}
	return joinOr(k)
}

func joinOr(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Parse parses the string form of an id of one of these forms. It accepts exactly what ProviderID.String
// produces for them.
func (fs IDForms) Parse(s string) (ProviderID, error) {
	parts := strings.Split(s, "/")
	kind := Kind(parts[0])
	var form IDForm
	found := false
	for _, f := range fs {
		if f.Kind == kind {
			form, found = f, true
			break
		}
	}
	if !found {
		return ProviderID{}, fmt.Errorf("invalid id %q: must start with %s (%s)", s, fs.kinds(), fs)
	}
	if len(parts)-1 != len(form.Parts) {
		return ProviderID{}, fmt.Errorf("invalid id %q: a %s id has %d parts after %q (%s)", s, kind, len(form.Parts), kind+"/", fs)
	}
	for i, p := range parts[1:] {
		if err := validSegment(p); err != nil {
			return ProviderID{}, fmt.Errorf("invalid id %q: part %d %w", s, i+2, err)
		}
	}
	id := ProviderID{Backend: kind, Target: parts[1], Name: parts[len(parts)-1]}
	if form.scoped() {
		id.Scope = parts[2]
	}
	return id, nil
}

// Validate reports whether id's string form is one these forms accept.
func (fs IDForms) Validate(id ProviderID) error {
	_, err := fs.Parse(id.String())
	return err
}

func validSegment(p string) error {
	if p == "" {
		return fmt.Errorf("is empty")
	}
	for _, r := range p {
		if r <= ' ' || r == 0x7f || r == '/' {
			return fmt.Errorf("%q contains a space, control character or slash", p)
		}
	}
	return nil
}

// String joins the parts: the scope only where there is one, as the id forms without a scope part have none.
func (id ProviderID) String() string {
	parts := []string{string(id.Backend), id.Target}
	if id.Scope != "" {
		parts = append(parts, id.Scope)
	}
	return strings.Join(append(parts, id.Name), "/")
}
