package backend

import (
	"context"
	"regexp"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// secretFieldKeys are log fields whose values never reach the log, whatever level is enabled.
var secretFieldKeys = []string{"password", "authorization", "token", "private_key", "client_key", "secret", "htpasswd"}

// secretPatterns catch credentials inside wire logs, where they are part of a larger text.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(authorization|proxy-authorization):\s*\S+(\s+\S+)?`),
	regexp.MustCompile(`(?i)"(password|access_token|refresh_token|private_key)"\s*:\s*"[^"]*"`),
}

// Subsystem returns ctx with the backend's tflog subsystem set up and its secrets masked. Backends log wire
// traffic with tflog.SubsystemTrace(ctx, string(kind), ...) on a ctx prepared by it.
func Subsystem(ctx context.Context, kind Kind) context.Context {
	sub := string(kind)
	ctx = tflog.NewSubsystem(ctx, sub)
	ctx = tflog.SubsystemMaskFieldValuesWithFieldKeys(ctx, sub, secretFieldKeys...)
	ctx = tflog.SubsystemMaskAllFieldValuesRegexes(ctx, sub, secretPatterns...)
	ctx = tflog.SubsystemMaskMessageRegexes(ctx, sub, secretPatterns...)
	return ctx
}

// WithLogging wraps b so every call logs its operation, ProviderID, duration and error class at DEBUG in the
// backend's own subsystem. The wrapper has exactly the optional capabilities b has (Reconfigurer, Successor,
// Checker), each forwarded explicitly: a caller asserting one on the wrapper learns what b can do, and handles
// its absence itself, as it must for a backend handed in without the wrapper.
func WithLogging(kind Kind, b Backend) Backend {
	l := &logged{kind: kind, next: b}
	r, reconfigures := b.(Reconfigurer)
	s, succeeds := b.(Successor)
	c, checks := b.(Checker)
	lr, ls, lc := loggedReconfigurer{l, r}, loggedSuccessor{l, s}, loggedChecker{l, c}
	switch {
	case reconfigures && succeeds && checks:
		return struct {
			Backend
			Reconfigurer
			Successor
			Checker
		}{l, lr, ls, lc}
	case reconfigures && succeeds:
		return struct {
			Backend
			Reconfigurer
			Successor
		}{l, lr, ls}
	case reconfigures && checks:
		return struct {
			Backend
			Reconfigurer
			Checker
		}{l, lr, lc}
	case succeeds && checks:
		return struct {
			Backend
			Successor
			Checker
		}{l, ls, lc}
	case reconfigures:
		return struct {
			Backend
			Reconfigurer
		}{l, lr}
	case succeeds:
		return struct {
			Backend
			Successor
		}{l, ls}
	case checks:
		return struct {
			Backend
			Checker
		}{l, lc}
	default:
		return l
	}
}

// logged logs the contract's methods; loggedReconfigurer, loggedSuccessor and loggedChecker each log one
// optional capability, and WithLogging adds those b has.
type logged struct {
	kind Kind
	next Backend
}

type loggedReconfigurer struct {
	*logged
	next Reconfigurer
}

type loggedSuccessor struct {
	*logged
	next Successor
}

type loggedChecker struct {
	*logged
	next Checker
}

func (l *logged) done(ctx context.Context, op, id string, start time.Time, err error) {
	fields := map[string]any{"operation": op, "duration_ms": time.Since(start).Milliseconds()}
	if id != "" {
		fields["provider_id"] = id
	}
	if err != nil {
		fields["error_class"] = ClassOf(err).String()
		fields["error"] = err.Error()
	}
	tflog.SubsystemDebug(ctx, string(l.kind), "backend call", fields)
}

func (l *logged) Create(ctx context.Context, spec Spec) (Instance, error) {
	ctx, start := Subsystem(ctx, l.kind), time.Now()
	inst, err := l.next.Create(ctx, spec)
	id := inst.ID.String()
	if inst.ID.Name == "" {
		id = spec.Name
	}
	l.done(ctx, "create", id, start, err)
	return inst, err
}

func (l *logged) Get(ctx context.Context, id ProviderID) (Instance, error) {
	ctx, start := Subsystem(ctx, l.kind), time.Now()
	inst, err := l.next.Get(ctx, id)
	l.done(ctx, "get", id.String(), start, err)
	return inst, err
}

func (l *logged) Update(ctx context.Context, id ProviderID, spec Spec) (Instance, error) {
	ctx, start := Subsystem(ctx, l.kind), time.Now()
	inst, err := l.next.Update(ctx, id, spec)
	l.done(ctx, "update", id.String(), start, err)
	return inst, err
}

func (l *logged) Delete(ctx context.Context, id ProviderID) error {
	ctx, start := Subsystem(ctx, l.kind), time.Now()
	err := l.next.Delete(ctx, id)
	l.done(ctx, "delete", id.String(), start, err)
	return err
}

func (l *logged) ListByTag(ctx context.Context, sel Selector) ([]Instance, error) {
	ctx, start := Subsystem(ctx, l.kind), time.Now()
	list, err := l.next.ListByTag(ctx, sel)
	l.done(ctx, "list_by_tag", "", start, err)
	return list, err
}

func (l loggedReconfigurer) Reconfigure(ctx context.Context, id ProviderID, settings proxyconf.Settings) (Instance, error) {
	ctx, start := Subsystem(ctx, l.kind), time.Now()
	inst, err := l.next.Reconfigure(ctx, id, settings)
	l.done(ctx, "reconfigure", id.String(), start, err)
	return inst, err
}

func (l loggedSuccessor) DeleteForReplacement(ctx context.Context, id ProviderID) error {
	ctx, start := Subsystem(ctx, l.kind), time.Now()
	err := l.next.DeleteForReplacement(ctx, id)
	l.done(ctx, "delete-for-replacement", id.String(), start, err)
	return err
}

func (c loggedChecker) Check(ctx context.Context) []Health {
	ctx, start := Subsystem(ctx, c.kind), time.Now()
	health := c.next.Check(ctx)
	tflog.SubsystemDebug(ctx, string(c.kind), "backend call", map[string]any{
		"operation": "check", "targets": len(health), "duration_ms": time.Since(start).Milliseconds(),
	})
	return health
}
