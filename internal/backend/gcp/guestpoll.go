package gcp

import (
	"context"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
)

// Guest attribute queries are rationed. Compute Engine allows at most 10 a minute per VM, in bursts of at
// most 3 a second, and beyond that may drop a report being written ("Setting and querying guest
// attributes", When to use guest attributes). The backend keeps within a smaller budget, leaving the rest to
// whoever else looks at the VM (gcloud compute instances get-guest-attributes, the console).
const (
	guestQueryBudgetPerMinute = 8
	guestQueryBudgetPerSecond = 2
)

// Where the guest polls start and how far apart they settle: a report is often there at once (a config the
// guest already runs), and a boot takes a minute or more, so after a few quick looks one query every ten
// seconds, which the minute's budget allows with room to spare.
const (
	defaultGuestPollInitial = 2 * time.Second
	defaultGuestPollMax     = 10 * time.Second
)

// clock is the time guest polls run on: the wall clock, or a test's, which plays minutes in no time.
type clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, returning ctx's error then. A wait that would outlive ctx's deadline
	// returns context.DeadlineExceeded at once: the caller reports now rather than be cut off mid-wait.
	Sleep(ctx context.Context, d time.Duration) error
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return context.DeadlineExceeded
	}
	return sleep(ctx, d)
}

// guestRation hands out the times at which each instance's guest attributes may be queried, across every
// call of the backend (a Create and a Reconfigure of one VM share its budget). Its reservations only grow,
// so the window checks need only the latest ones.
type guestRation struct {
	mu       sync.Mutex
	reserved map[string][]time.Time
}

// reserve books the earliest time at or after now when one more query of the instance at key stays within
// the budget, and returns how long to wait for it.
func (g *guestRation) reserve(now time.Time, key string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reserved == nil {
		g.reserved = map[string][]time.Time{}
	}
	q := g.reserved[key]
	for len(q) > 0 && now.Sub(q[0]) >= time.Minute {
		q = q[1:]
	}
	at := now
	if n := len(q); n > 0 && q[n-1].After(at) {
		at = q[n-1]
	}
	if n := len(q); n >= guestQueryBudgetPerMinute {
		at = later(at, q[n-guestQueryBudgetPerMinute].Add(time.Minute))
	}
	if n := len(q); n >= guestQueryBudgetPerSecond {
		at = later(at, q[n-guestQueryBudgetPerSecond].Add(time.Second))
	}
	g.reserved[key] = append(q, at)
	return at.Sub(now)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// guestAttributesAdvice is what to do when a VM never reports: it runs, so its startup script is the place to
// look, and the one thing outside the VM that silences every report is an organization policy.
const guestAttributesAdvice = "The VM runs but its startup script has not reported. Its serial console shows the script's progress " +
	"(gcloud compute instances get-serial-port-output NAME --zone ZONE). The provider sets " + MetadataEnableGuestAttributes +
	"=TRUE on the VM; the organization policy constraints/compute.disableGuestAttributesAccess overrides it and must not be enforced on the project."

// waitApplied polls the guest attribute egress/applied until it names configID, within the ration. egress/error
// naming it means the guest refused the config: Permanent, with the guest's words. It never waits past ctx's
// deadline: when the next query could only come after it, it gives up at once with the last answer.
func (b *Backend) waitApplied(ctx context.Context, p *project, zone, name, configID string) error {
	obj := instanceObject(p.id, zone, name)
	key := p.id + "/" + zone + "/" + name
	notYet := &backend.Error{Class: backend.ClassTransient, Object: obj, Advice: guestAttributesAdvice,
		Err: errString("the guest has not reported config " + configID + " applied yet")}
	var last error = notYet
	delay := b.guestPollInitial
	pause := func(d time.Duration) error {
		if err := b.clock.Sleep(ctx, d); err != nil {
			return &backend.GaveUpError{Cause: err, Last: last}
		}
		return nil
	}
	for {
		if err := pause(b.guestRation.reserve(b.clock.Now(), key)); err != nil {
			return err
		}
		ga, err := p.instances.GetGuestAttributes(ctx, &computepb.GetGuestAttributesInstanceRequest{
			Project: p.id, Zone: zone, Instance: name, QueryPath: proto.String(gcpguest.GuestAttributeNamespace + "/"),
		})
		switch err = classify(obj, err); {
		case backend.IsNotFound(err):
			// Nothing under egress/ yet: the guest has not reported. The instance itself is checked by Get.
			last = notYet
		case err != nil && !backend.Retryable(err):
			return err
		case err != nil:
			last = err
		default:
			done, refused := appliedOrRefused(ga, configID)
			if done {
				return nil
			}
			if refused != "" {
				return backend.Permanent(obj, "the guest refused the new config: %s", refused)
			}
			last = notYet
		}
		if err := pause(delay); err != nil {
			return err
		}
		delay = min(delay*3/2, b.guestPollMax)
	}
}

// appliedOrRefused reads the guest's report of configID: applied, or the guest's words refusing it.
func appliedOrRefused(ga *computepb.GuestAttributes, configID string) (applied bool, refused string) {
	for _, e := range ga.GetQueryValue().GetItems() {
		switch e.GetKey() {
		case gcpguest.GuestAttributeApplied:
			if strings.TrimSpace(e.GetValue()) == configID {
				return true, ""
			}
		case gcpguest.GuestAttributeError:
			if strings.Contains(e.GetValue(), configID) {
				refused = e.GetValue()
			}
		}
	}
	return false, refused
}

type errString string

func (e errString) Error() string { return string(e) }
