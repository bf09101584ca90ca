package computefake

import (
	"math/rand/v2"
	"net/http"
	"regexp"
)

// Fault makes matching requests fail. Faults are checked in the order they were added; the first that fires wins.
type Fault struct {
	// Method ("" any) and PathRE (nil any) select the requests.
	Method string
	PathRE *regexp.Regexp
	// Status and Reason make the error answer (for example 503 "backendError", 429 "rateLimitExceeded").
	Status int
	Reason string
	// Drop closes the connection without an answer instead.
	Drop bool
	// After handles the request first and then loses the answer, so the change happened but the client
	// does not know: the case that tests idempotent retries.
	After bool
	// Rate is the share of matching requests that fail (0 means all), drawn from a generator seeded by Seed,
	// so a run is repeatable.
	Rate float64
	Seed uint64
	// Times, when positive, is how many requests may fail in all.
	Times int
	// Skip lets that many matching requests through before the fault fires: a cut at the Nth call of a kind.
	Skip int

	fired   int
	skipped int
	rnd     *rand.Rand
	// pause, when set, holds the request instead of failing it (PauseNext).
	pause *Pause
}

// AddFault installs f.
func (s *Server) AddFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.rnd = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	s.faults = append(s.faults, &f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Fired reports how many requests the faults made fail in all.
func (s *Server) Fired() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		n += f.fired
	}
	return n
}

// fault picks the fault that fires for r, if any. The caller holds s.mu.
func (s *Server) fault(r *http.Request) *Fault {
	for _, f := range s.faults {
		if f.Method != "" && f.Method != r.Method {
			continue
		}
		if f.PathRE != nil && !f.PathRE.MatchString(r.URL.Path) {
			continue
		}
		if f.Times > 0 && f.fired >= f.Times {
			continue
		}
		if f.skipped < f.Skip {
			f.skipped++
			continue
		}
		if f.Rate > 0 && f.rnd.Float64() >= f.Rate {
			continue
		}
		f.fired++
		return f
	}
	return nil
}

// apply answers with the fault: an error body like Compute Engine's, or a dropped connection.
func (f *Fault) apply(w http.ResponseWriter) int {
	if f.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return 0
			}
		}
	}
	status, reason := f.Status, f.Reason
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	if reason == "" {
		reason = "backendError"
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "0")
	}
	writeError(w, status, reason, "injected fault: "+reason)
	return status
}
