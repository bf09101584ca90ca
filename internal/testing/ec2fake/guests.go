package ec2fake

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
)

// guestPoll is how often PlayGuests' agents look at their parameters. The real agent polls as well (every
// 30 seconds, watchInterval in aws/guest/userdata.go); the fake's is short so that a test waiting for a
// report waits little.
const guestPoll = 5 * time.Millisecond

// nameTag is the tag an instance's name is in, the one the backend names a proxy's instance with.
const nameTag = "Name"

// PlayGuests plays the guest side of the proxies in every region of the fake that can be reached, until
// stop is called or the test ends: the agent of each instance, which applies each configuration written to
// its proxy's config parameter (guest.ParameterPath(name, guest.ParameterConfig)) and
// reports its config id in the applied parameter (guest.ParameterApplied). No proxy runs: what a
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

// guestsReport is one round of every agent: each proxy whose config parameter (a manifest and its parts, or
// the whole config, guest.LoadConfig) names a config id its applied parameter does not hold, and that has a
// running instance, gets that id written. The caller holds s.mu.
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
			// In either format, as the agent its instance runs reads it: a manifest's parts that do not match it
			// (half of a write) are not applied yet.
			c, _, err := guest.LoadConfig(rg.params[param].Value, func(i int) (string, bool) {
				p := rg.params[guest.ParameterPath(proxy, guest.PartName(guest.ParameterConfig, i))]
				if p == nil {
					return "", false
				}
				return p.Value, true
			})
			if err != nil || !authenticated(rg, proxy, c) {
				continue
			}
			applied := guest.ParameterPath(proxy, guest.ParameterApplied)
			cur := guest.Applied{}
			if p := rg.params[applied]; p != nil {
				cur = guest.ParseApplied(p.Value)
			}
			if cur.ConfigID == c.ConfigID || !rg.runsNamed(proxy) {
				continue
			}
			report := guest.Applied{ConfigID: c.ConfigID}
			switch rg.guests[proxy] {
			case GuestSilent:
				continue
			case GuestRefuses:
				mac := guest.RefusedMAC(c.MAC)
				if cur.Refused == c.ConfigID && cur.RefusedMAC == mac {
					continue // said so already
				}
				report = guest.Applied{ConfigID: cur.ConfigID, Refused: c.ConfigID, RefusedMAC: mac, Reason: GuestRefusal}
			}
			body, err := json.Marshal(map[string]any{"Name": applied, "Value": report.String(), "Type": "String", "Overwrite": true})
			if err != nil {
				continue
			}
			// A write PutParameter refuses (an empty config id, the region's parameter quota) is not made, as
			// the agent's own call would fail; it tries again next round.
			_, _ = s.putParameter(rg, body)
		}
	}
}

// authenticated reports whether c's MAC is the one the key in the proxy's secrets parameter gives, as the
// real agent checks before it installs anything (guest.ConfigMAC): a config the provider did not
// write is never reported applied. The caller holds s.mu.
func authenticated(rg *region, proxy string, c guest.Config) bool {
	p := rg.params[guest.ParameterPath(proxy, guest.ParameterSecrets)]
	if p == nil {
		return false
	}
	var sec guest.Secrets
	if json.Unmarshal([]byte(p.Value), &sec) != nil {
		return false
	}
	key, err := base64.StdEncoding.DecodeString(sec.ConfigKey)
	return err == nil && len(key) == guest.ConfigKeyBytes &&
		hmac.Equal([]byte(c.MAC), []byte(guest.ConfigMAC(key, guest.ParameterPath(proxy, ""), c)))
}

// GuestMode is how a proxy's agent behaves under PlayGuests.
type GuestMode int

const (
	// GuestApplies applies each authenticated config and reports it, as a healthy guest does.
	GuestApplies GuestMode = iota
	// GuestSilent reports nothing: an instance still booting, or whose agent cannot reach SSM. Setting
	// GuestApplies later makes it a late guest.
	GuestSilent
	// GuestRefuses refuses every new config, as the agent does when Squid, nft or its guards refuse one:
	// the last config applied stays, and the applied parameter says which one was refused and why.
	GuestRefuses
)

// GuestRefusal is the reason GuestRefuses reports.
const GuestRefusal = "squid rejected config"

// SetGuest sets how the agent of the proxy named proxy in region behaves from the next round of PlayGuests.
func (s *Server) SetGuest(region, proxy string, m GuestMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	if rg.guests == nil {
		rg.guests = map[string]GuestMode{}
	}
	rg.guests[proxy] = m
}

// proxyOfConfig is the proxy whose config parameter param is, if it is one.
func proxyOfConfig(param string) (string, bool) {
	rest, underPrefix := strings.CutPrefix(param, guest.ParameterPrefix)
	proxy, isConfig := strings.CutSuffix(rest, "/"+guest.ParameterConfig)
	if !underPrefix || !isConfig || proxy == "" || strings.Contains(proxy, "/") && !memberRE.MatchString(proxy) {
		return "", false
	}
	return proxy, true
}

// memberRE is the parameters' name of member k > 0 of a proxy of several instances, whose instance carries
// the proxy's Name and memberTag = k (the aws backend's TagMember).
var memberRE = regexp.MustCompile(`^([^/]+)/member-([1-9][0-9]*)$`)

const memberTag = "egress-member"

// RunsInstanceNamed reports whether an instance whose Name tag is name runs in region: for a proxy, whether
// its guest is up.
func (s *Server) RunsInstanceNamed(region, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceAll()
	return s.mustRegion(region).runsNamed(name)
}

// runsNamed reports whether an instance whose Name tag is name runs in rg. The caller holds s.mu.
//
// A name of member k (memberRE) is its instance's: the proxy's Name with memberTag = k; a proxy's own name is
// its first instance's, without memberTag.
func (rg *region) runsNamed(name string) bool {
	member := ""
	if m := memberRE.FindStringSubmatch(name); m != nil {
		name, member = m[1], m[2]
	}
	for _, in := range rg.instances {
		if !in.gone && in.State == StateRunning && in.Tags[nameTag] == name && in.Tags[memberTag] == member {
			return true
		}
	}
	return false
}
