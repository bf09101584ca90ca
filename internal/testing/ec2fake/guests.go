package ec2fake

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// guestPoll is how often PlayGuests' agents look at their parameters. The real agent polls as well (every
// 30 seconds, awsWatchInterval in proxyconf/awsguest.go); the fake's is short so that a test waiting for a
// report waits little.
const guestPoll = 5 * time.Millisecond

// nameTag is the tag an instance's name is in, the one the backend names a proxy's instance with.
const nameTag = "Name"

// PlayGuests plays the guest side of the proxies in every region of the fake that can be reached, until
// stop is called or the test ends: the agent of each instance, which applies each configuration written to
// its proxy's config parameter (proxyconf.AWSParameterPath(name, proxyconf.AWSParameterConfig)) and
// reports its config id in the applied parameter (proxyconf.AWSParameterApplied). No proxy runs: what a
// test proves is the backend's part of a change.
//
// Only an agent that runs reports: one whose proxy has a running instance (Name tag), so a stopped,
// pending or terminated instance's configuration is never reported applied, and an agent whose region
// cannot be reached (SetReachable) cannot report either. Each look and write is made under the fake's lock,
// so an instance cannot stop, nor its parameters be deleted, between the look and the write. The write is
// made as PutParameter would make it (its rules, a new version of a String), but it is no request: no
// request log, throttle bucket or fault sees it, so the requests a test counts are its clients' alone.
//
// stop ends the play and returns once no agent writes any more; calling it again does nothing.
func (s *Server) PlayGuests() (stop func()) {
	tick := time.NewTicker(guestPoll)
	stopPlay := s.playGuests(tick.C)
	stop = func() {
		stopPlay()
		tick.Stop()
	}
	s.t.Cleanup(stop)
	return stop
}

// playGuests runs a round of the agents for each value of ticks, until stop or the test's end.
func (s *Server) playGuests(ticks <-chan time.Time) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-ticks:
			}
			s.mu.Lock()
			s.guestsReport()
			s.mu.Unlock()
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	s.t.Cleanup(stop)
	return stop
}

// guestsReport is one round of every agent: each proxy whose config parameter names a config id its
// applied parameter does not hold, and that has a running instance, gets that id written. The caller holds
// s.mu.
func (s *Server) guestsReport() {
	// Instances move on as they would for any reader (Timing), so an instance due to run is seen running.
	s.advanceAll()
	for _, rg := range s.regions {
		if rg.unreachable {
			continue
		}
		for _, param := range sortedKeys(rg.params) {
			proxy, ok := proxyOfConfig(param)
			if !ok {
				continue
			}
			var c proxyconf.AWSConfig
			if json.Unmarshal([]byte(rg.params[param].Value), &c) != nil {
				continue
			}
			applied := proxyconf.AWSParameterPath(proxy, proxyconf.AWSParameterApplied)
			if cur := rg.params[applied]; (cur != nil && cur.Value == c.ConfigID) || !rg.runsNamed(proxy) {
				continue
			}
			body, err := json.Marshal(map[string]any{"Name": applied, "Value": c.ConfigID, "Type": "String", "Overwrite": true})
			if err != nil {
				continue
			}
			// A write PutParameter refuses (an empty config id, the region's parameter quota) is not made, as
			// the agent's own call would fail; it tries again next round.
			_, _ = s.putParameter(rg, body)
		}
	}
}

// proxyOfConfig is the proxy whose config parameter param is, if it is one.
func proxyOfConfig(param string) (string, bool) {
	rest, underPrefix := strings.CutPrefix(param, proxyconf.AWSParameterPrefix)
	proxy, isConfig := strings.CutSuffix(rest, "/"+proxyconf.AWSParameterConfig)
	if !underPrefix || !isConfig || proxy == "" || strings.Contains(proxy, "/") {
		return "", false
	}
	return proxy, true
}

// RunsInstanceNamed reports whether an instance whose Name tag is name runs in region: for a proxy, whether
// its guest is up.
func (s *Server) RunsInstanceNamed(region, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceAll()
	return s.mustRegion(region).runsNamed(name)
}

// runsNamed reports whether an instance whose Name tag is name runs in rg. The caller holds s.mu.
func (rg *region) runsNamed(name string) bool {
	for _, in := range rg.instances {
		if !in.gone && in.State == StateRunning && in.Tags[nameTag] == name {
			return true
		}
	}
	return false
}
