package backend

import (
	"fmt"
	"strings"
)

// ProviderID finds an instance again with nothing but itself: no provider-level default is needed to read it.
// Its string form is the resource's id and import string:
//
//	kubernetes/<cluster>/<namespace>/<name>
//	gcp/<project>/<zone>/<name>
//	kvm/<host>/<name>
type ProviderID struct {
	Backend Kind
	// Target is the cluster, project or host.
	Target string
	// Scope is the namespace or zone; always empty for kvm.
	Scope string
	Name  string
}

// segments is how many slash-separated parts each kind's ID has after the kind itself.
var segments = map[Kind]int{KindKubernetes: 3, KindGCP: 3, KindKVM: 2}

// ProviderIDForms are the accepted forms, for error messages and documentation.
var ProviderIDForms = []string{"kubernetes/<cluster>/<namespace>/<name>", "gcp/<project>/<zone>/<name>", "kvm/<host>/<name>"}

// ProviderIDFormat describes the accepted forms in one line of text.
var ProviderIDFormat = strings.Join(ProviderIDForms[:2], ", ") + " or " + ProviderIDForms[2]

// ParseProviderID parses the string form. It accepts exactly what String produces.
func ParseProviderID(s string) (ProviderID, error) {
	parts := strings.Split(s, "/")
	kind := Kind(parts[0])
	want, ok := segments[kind]
	if !ok {
		return ProviderID{}, fmt.Errorf("invalid id %q: must start with kubernetes/, gcp/ or kvm/ (%s)", s, ProviderIDFormat)
	}
	if len(parts)-1 != want {
		return ProviderID{}, fmt.Errorf("invalid id %q: a %s id has %d parts after %q (%s)", s, kind, want, kind+"/", ProviderIDFormat)
	}
	for i, p := range parts[1:] {
		if err := validSegment(p); err != nil {
			return ProviderID{}, fmt.Errorf("invalid id %q: part %d %w", s, i+2, err)
		}
	}
	id := ProviderID{Backend: kind, Target: parts[1], Name: parts[len(parts)-1]}
	if want == 3 {
		id.Scope = parts[2]
	}
	return id, nil
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

// Validate reports whether String would produce something ParseProviderID accepts.
func (id ProviderID) Validate() error {
	_, err := ParseProviderID(id.String())
	return err
}

func (id ProviderID) String() string {
	if id.Backend == KindKVM {
		return strings.Join([]string{string(id.Backend), id.Target, id.Name}, "/")
	}
	return strings.Join([]string{string(id.Backend), id.Target, id.Scope, id.Name}, "/")
}
