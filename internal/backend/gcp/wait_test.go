package gcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// An operation that would run for an hour stops being waited for as soon as ctx ends, with ctx's error.
func TestWaitHonoursCancellation(t *testing.T) {
	t.Parallel()
	_, b := newTest(t, computefake.Options{OperationLatency: time.Hour})
	p, err := b.clients(ctxT(t), testProject)
	if err != nil {
		t.Fatal(err)
	}
	op, err := p.addresses.Insert(ctxT(t), &computepb.InsertAddressRequest{Project: testProject, Region: "us-central1",
		AddressResource: &computepb.Address{Name: proto.String("egress-cancel")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = b.wait(ctx, op, "obj")
	if !errors.Is(err, context.Canceled) || backend.ClassOf(err) != backend.ClassTransient {
		t.Fatalf("wait = %v, want a Transient error wrapping context.Canceled", err)
	}
}

// 429 answers to operation polls (with Retry-After: 0, as the fake sends) are retried until the operation ends.
func TestWaitRetriesRateLimitedPolls(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	fake.SetQuota("us-central1", "STATIC_ADDRESSES", 0)
	p, err := b.clients(ctxT(t), testProject)
	if err != nil {
		t.Fatal(err)
	}
	fake.SetOperationLatency(time.Millisecond)
	op, err := p.addresses.Insert(ctxT(t), &computepb.InsertAddressRequest{Project: testProject, Region: "us-central1",
		AddressResource: &computepb.Address{Name: proto.String("egress-rl")}})
	if err != nil {
		t.Fatal(err)
	}
	fake.AddFault(computefake.Fault{Status: 429, Reason: "rateLimitExceeded", Times: 3})
	err = b.wait(ctxT(t), op, "obj")
	if backend.ClassOf(err) != backend.ClassQuota || fake.Fired() != 3 {
		t.Fatalf("wait = %v after %d rate-limited polls, want the operation's Quota error after 3", err, fake.Fired())
	}
}
