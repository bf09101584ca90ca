package provider

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// vmBootLock is the lock every test that boots a VM or restarts the tests' libvirtd holds (see the README).
const vmBootLock = "/tmp/egress-vmboot.lock"

// holdVMBootLock takes the lock, waiting while another developer's test holds it, and returns its release.
// The lock is released at the test's end at the latest.
func holdVMBootLock(t *testing.T, limit time.Duration) (release func()) {
	t.Helper()
	f, err := os.OpenFile(vmBootLock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(limit)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			t.Fatalf("taking %s (held by another test that boots VMs or restarts libvirtd): %v", vmBootLock, err)
		}
		time.Sleep(time.Second) // polling a lock another process holds: no event to wait on
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = f.Close() }) } // closing releases the lock
	t.Cleanup(release)
	return release
}

// restartLibvirtd restarts the acceptance tests' private daemon (EGRESS_LIBVIRT_INSTANCE) through the
// environment script; the caller holds the lock. down runs once the old daemon is gone, before the new one
// is up: the script says so on its standard error.
func restartLibvirtd(ctx context.Context, down func()) error {
	cmd := exec.CommandContext(ctx, "../../scripts/libvirt-env.sh", "restart")
	cmd.Env = append(os.Environ(), "EGRESS_RESTART_LOCK_HELD=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var said strings.Builder
	sawDown := false
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		said.WriteString(lines.Text() + "\n")
		if !sawDown && strings.Contains(lines.Text(), "libvirtd is down") {
			sawDown = true
			down()
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("scripts/libvirt-env.sh restart: %w: %s", err, said.String())
	}
	if !sawDown {
		return fmt.Errorf("scripts/libvirt-env.sh restart never said the daemon was down: %s", said.String())
	}
	return nil
}

// restartWhenCreating restarts libvirtd once the owner's first domain or volume exists and before all n
// proxies run: the moment an apply is busiest. It reports how many ran when it restarted.
func restartWhenCreating(ctx context.Context, b *kvm.Backend, owner string, n int, down func()) (running int, err error) {
	err = backend.Poll(ctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		list, err := b.ListByTag(ctx, backend.Selector{Owner: owner})
		if err != nil || len(list) == 0 {
			return false, nil //nolint:nilerr // not yet, or a busy daemon: look again
		}
		running = 0
		for _, in := range list {
			if in.State == backend.StateRunning {
				running++
			}
		}
		return true, nil
	})
	if err != nil {
		return running, fmt.Errorf("no proxy of owner %s appeared: %w", owner, err)
	}
	if running >= n {
		return running, fmt.Errorf("all %d proxies ran before the restart: it did not fall mid-apply", n)
	}
	return running, restartLibvirtd(ctx, down)
}

// TestAccProxyKVM_libvirtdRestartedMidApply restarts the daemon while five proxies are being created: every
// connection breaks under some call, and the apply still ends with five running proxies and nothing to plan.
func TestAccProxyKVM_libvirtdRestartedMidApply(t *testing.T) {
	uri := kvmAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	const n = 5
	config := kvmProviderBlock(owner, uri) + fmt.Sprintf(`
resource "egress_proxy" "p" {
  count                = %d
  kvm                  = { memory_mib = 128, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = [".example.com"]
}
`, n)
	type restart struct {
		running int
		took    time.Duration
		err     error
	}
	done := make(chan restart, 1)
	// Set when the apply has ended (its Check runs). The apply was running when the first proxy appeared; if
	// it still runs at the moment the old daemon is gone, the daemon died under it.
	var applyEnded atomic.Bool
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					// Held from before the apply, so the restart cannot be kept waiting past it; released as soon
					// as the daemon is back, so others' tests wait seconds, not the whole apply.
					release := holdVMBootLock(t, 15*time.Minute)
					go func() {
						defer release()
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
						defer cancel()
						start := time.Now()
						var endedFirst bool
						running, err := restartWhenCreating(ctx, b, owner, n, func() { endedFirst = applyEnded.Load() })
						if err == nil && endedFirst {
							err = fmt.Errorf("the apply had ended before libvirtd went down: the restart did not fall mid-apply")
						}
						done <- restart{running, time.Since(start), err}
					}()
				},
				Config: config,
				Check: func(*terraform.State) error {
					applyEnded.Store(true)
					r := <-done
					if r.err != nil {
						return r.err
					}
					t.Logf("libvirtd restarted %v into the apply, with %d of %d proxies running", r.took.Round(time.Millisecond), r.running, n)
					list, err := b.ListByTag(context.Background(), backend.Selector{Owner: owner})
					if err != nil {
						return err
					}
					running := 0
					for _, in := range list {
						if in.State == backend.StateRunning {
							running++
						}
					}
					if running != n || len(list) != n {
						return fmt.Errorf("after the apply the owner has %d objects, %d running, want exactly %d running: %+v", len(list), running, n, list)
					}
					return nil
				},
			},
			{
				// Nothing the restart interrupted is left for the next plan to do.
				Config:   config,
				PlanOnly: true,
			},
		},
	})
}
