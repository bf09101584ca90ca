package gcp

import (
	"context"
	"fmt"
	"sync"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Check reports each project's health: credentials accepted and the project reachable (the zone read), the
// default zone UP, and the region's CPU and address quota headroom as details.
func (b *Backend) Check(ctx context.Context) []backend.Health {
	ids := b.Projects()
	out := make([]backend.Health, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = b.checkProject(ctx, id)
		}()
	}
	wg.Wait()
	return out
}

func (b *Backend) checkProject(ctx context.Context, id string) backend.Health {
	h := backend.Health{Target: id, Details: map[string]string{}}
	p, err := b.clients(ctx, id)
	if err != nil {
		h.Reason = err.Error()
		return h
	}
	zone, region := p.settings.DefaultZone, p.settings.Region
	h.Details["zone"], h.Details["region"] = zone, region
	z, err := p.zones.Get(ctx, &computepb.GetZoneRequest{Project: id, Zone: zone})
	if err != nil {
		h.Reason = classify("gcp zone "+zone+" in project "+id, err).Error()
		return h
	}
	h.Details["zone_status"] = z.GetStatus()
	r, err := p.regions.Get(ctx, &computepb.GetRegionRequest{Project: id, Region: region})
	if err != nil {
		h.Reason = classify("gcp region "+region+" in project "+id, err).Error()
		return h
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
		h.Reason = fmt.Sprintf("zone %s is %s", zone, z.GetStatus())
	case short != "":
		h.Reason = short
	default:
		h.Healthy = true
	}
	return h
}
