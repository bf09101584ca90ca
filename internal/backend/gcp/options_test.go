package gcp

import "github.com/egress-proxies/terraform-provider-egress/internal/backend"

// optionsOf is the *Options a test's placement carries, for reading and changing them in place; a placement
// that carries none or another backend's gets fresh ones, which fail the test's own checks visibly.
func optionsOf(p backend.Placement) *Options {
	if o, ok := p.Options.(*Options); ok && o != nil {
		return o
	}
	return &Options{}
}
