package backend

import (
	"context"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"
)

// CleanupTimeout bounds a clean-up (giving back what a refused create made, releasing an address): long
// enough for a few retried API calls, short enough that a clean-up that keeps failing returns and is heard.
const CleanupTimeout = 2 * time.Minute

// CleanupContext is the context a clean-up runs under. It keeps ctx's values (the log subsystem, the
// ownership) but not its cancellation, because the caller's end (a timeout, Ctrl-C) is often why the clean-up
// runs at all; and it ends after CleanupTimeout, so that it never outlives the caller by more than that.
func CleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}

// BestEffort reports a clean-up step that failed, instead of dropping its error: a warning in the backend's
// log subsystem naming the step and the error. The operation's own result stands; what was left carries the
// proxy's labels, so egress_proxy_orphans lists it. A step that found nothing to remove (NotFound) is no
// failure.
func BestEffort(ctx context.Context, kind Kind, step string, err error) {
	if err == nil || IsNotFound(err) {
		return
	}
	tflog.SubsystemWarn(ctx, string(kind), "clean-up step failed; what it should have removed is left (egress_proxy_orphans lists it)",
		map[string]any{"step": step, "error": err.Error()})
}
