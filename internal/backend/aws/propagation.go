package aws

import (
	"fmt"
	"strings"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// defaultPropagation bounds how long an answer that something made moments ago does not exist is retried:
// EC2 and IAM are eventually consistent, and an id CreateSecurityGroup or AllocateAddress has just answered,
// or an instance profile IAM has just made (by this apply's other resources), can be unknown for a while
// to the next call ("Eventual consistency in the Amazon EC2 API"; IAM User Guide, "Changes that I make are
// not always immediately visible"). Two minutes, as other Terraform providers for AWS wait for both.
const defaultPropagation = 2 * time.Minute

// propagating is what an error says has not propagated yet, "" when it says nothing of the kind.
func propagating(err error) string {
	switch code := errorCode(err); {
	case code == "InvalidGroup.NotFound":
		return "security group"
	case code == "InvalidAllocationID.NotFound":
		return "Elastic IP"
	case code == "InvalidParameterValue" && strings.Contains(err.Error(), "Invalid IAM Instance Profile"):
		return "instance profile"
	}
	return ""
}

// window is the time in which a call retries what propagating names; it starts when the call does.
type window struct {
	until time.Time
	limit time.Duration
}

func (b *Backend) propagationWindow() window {
	return window{until: time.Now().Add(b.propagation), limit: b.propagation}
}

// classify is the package's classify, but an error that something has not propagated yet is Transient while
// the window lasts, and past it Permanent with advice: it is no longer a delay but a name or id that does
// not exist (a typo, another region or account).
func (w window) classify(object string, err error) error {
	what := propagating(err)
	if what == "" {
		return classify(object, err)
	}
	if time.Now().Before(w.until) {
		return backend.NewError(backend.ClassTransient, object, fmt.Errorf("the %s is not visible to EC2 yet (it may have been made moments ago): %w", what, err))
	}
	return &backend.Error{Class: backend.ClassPermanent, Object: object, Err: err,
		Advice: fmt.Sprintf("EC2 still did not know the %s after %s of retries: check that it exists, in this region and account, then apply again.", what, w.limit)}
}
