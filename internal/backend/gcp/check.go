package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Check reports each project's health: every permission the backend needs held by the provider's account
// (Degraded, naming the missing ones, otherwise), credentials accepted and the project reachable (the zone
// read), the default zone UP, and the region's CPU and address quota headroom as details.
func (b *Backend) Check(ctx context.Context) []backend.Health {
	return backend.EachTarget(ctx, b.Projects(), b.checkProject)
}

func (b *Backend) checkProject(ctx context.Context, id string) backend.Health {
	h := backend.Health{Target: id, Details: map[string]string{}}
	unhealthy := func(reason, message string) backend.Health {
		h.Reason, h.Details[backend.DetailMessage] = reason, message
		return h
	}
	// A failed request's message ends with what to do about it, as a diagnostic would (a permission missing
	// names the role file).
	failed := func(object string, err error) backend.Health {
		cerr := classify(object, err)
		msg := cerr.Error()
		if a := backend.AdviceOf(cerr); a != "" {
			msg += ". " + a
		}
		return unhealthy(healthReason(err), msg)
	}
	p, err := b.clients(ctx, id)
	if err != nil {
		// Credentials that cannot be read or used are the only thing that fails before the first request.
		return unhealthy(backend.HealthUnauthorized, err.Error())
	}
	// The permissions first: a missing one is named, with the others missing, before any read fails on it.
	if reason, msg := b.permissionHealth(ctx, p, h.Details); reason != "" {
		return unhealthy(reason, msg)
	}
	zone, region := p.settings.DefaultZone, p.settings.Region
	h.Details["zone"], h.Details["region"] = zone, region
	z, err := p.zones.Get(ctx, &computepb.GetZoneRequest{Project: id, Zone: zone})
	if err != nil {
		return failed("gcp zone "+zone+" in project "+id, err)
	}
	h.Details["zone_status"] = z.GetStatus()
	r, err := p.regions.Get(ctx, &computepb.GetRegionRequest{Project: id, Region: region})
	if err != nil {
		return failed("gcp region "+region+" in project "+id, err)
	}
	short := ""
	for _, q := range r.GetQuotas() {
		switch q.GetMetric() {
		case "CPUS", "STATIC_ADDRESSES", "IN_USE_ADDRESSES", "INSTANCES":
			h.Details["quota_"+q.GetMetric()] = fmt.Sprintf("%g/%g", q.GetUsage(), q.GetLimit())
			if q.GetMetric() == "CPUS" && q.GetLimit()-q.GetUsage() < 2 {
				short = fmt.Sprintf("quota CPUS in %s has %g of %g left: not enough for one more proxy", region, q.GetLimit()-q.GetUsage(), q.GetLimit())
			}
		}
	}
	switch {
	case z.GetStatus() != "UP":
		return unhealthy(backend.HealthDegraded, fmt.Sprintf("zone %s is %s", zone, z.GetStatus()))
	case short != "":
		return unhealthy(backend.HealthDegraded, short)
	}
	h.Healthy, h.Reason = true, backend.HealthHealthy
	return h
}

// healthReason names what a failed check request found, as one of backend.HealthReasons.
func healthReason(err error) string {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch ge.Code {
		case http.StatusUnauthorized, http.StatusForbidden:
			return backend.HealthUnauthorized
		case http.StatusNotFound:
			return backend.HealthNotFound
		}
		return backend.HealthError
	}
	if backend.ClassOf(classify("", err)) == backend.ClassTransient {
		return backend.HealthUnreachable
	}
	return backend.HealthError
}
