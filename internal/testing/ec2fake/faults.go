package ec2fake

import (
	"math"
	"net/http"
	"strings"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// Fault makes matching requests fail. Faults are checked in the order they were added; the first that
// fires wins. A fault fires after the signature and the action are checked, so it never hides a request the
// service would refuse anyway.
type Fault struct {
	// Action ("" any) and Region ("" any) select the requests.
	Action, Region string
	// Code is the error answered, in the service's form (EC2 XML, SSM JSON, STS XML, Service Quotas and
	// CloudWatch Logs JSON); "" is the service's internal error (InternalError, InternalServerError,
	// InternalFailure, ServiceException, ServiceUnavailableException). Status, when set, overrides the HTTP status the service answers Code with.
	Code, Message string
	Status        int
	// Drop closes the connection without an answer instead.
	Drop bool
	// After handles the request first and only then fails it: the change is made but the client does not
	// learn it. With Drop, the answer is lost; the case that idempotent retries must survive.
	After bool
	// Times, when positive, is how many requests it fails in all; 0 fails every matching request.
	Times int
	// Skip lets that many matching requests through before the fault takes any: a cut at the Nth call.
	Skip int

	fired int
	// pause, when set, holds the request instead of failing it (PauseNext).
	pause *Pause
}

// AddFault installs f.
func (s *Server) AddFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// FailNext makes the next request of action fail with code.
func (s *Server) FailNext(action, code string) {
	s.AddFault(Fault{Action: action, Code: code, Times: 1})
}

// LoseNextAnswer makes the next request of action take effect and then lose its answer: the connection is
// closed unanswered, as a timeout or a reset on the way back would.
func (s *Server) LoseNextAnswer(action string) {
	s.AddFault(Fault{Action: action, Drop: true, After: true, Times: 1})
}

// Pause holds one request in the fake until the test lets it go on (Resume) or drops it (Drop).
type Pause = testutil.Pause

// PauseNext holds the next request of action: before the fake handles it, or, with after, once it is
// handled (the change made) and before it is answered. The request waits until Resume or Drop; Reached is
// closed once it waits. A pause still holding a request when the test ends is dropped, so that the server
// can close.
func (s *Server) PauseNext(action string, after bool) *Pause {
	p := testutil.NewPause()
	s.AddFault(Fault{Action: action, After: after, Times: 1, pause: p})
	s.t.Cleanup(p.Drop)
	return p
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Fired is how many requests the faults made fail.
func (s *Server) Fired() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		n += f.fired
	}
	return n
}

// fault picks the fault that fires for c, if any. The caller holds s.mu.
func (s *Server) fault(c *call) *Fault {
	for _, f := range s.faults {
		if (f.Action != "" && f.Action != c.action) || (f.Region != "" && f.Region != c.region) {
			continue
		}
		if f.Times > 0 && f.fired >= f.Times {
			continue
		}
		if f.Skip > 0 {
			f.Skip--
			continue
		}
		f.fired++
		return f
	}
	return nil
}

// applyFault answers c with f.
func (s *Server) applyFault(w http.ResponseWriter, c *call, f *Fault) {
	if f.Drop {
		s.dropped(w, c)
		return
	}
	var e *apiError
	switch c.service {
	case "ssm":
		code := f.Code
		if code == "" {
			code = "InternalServerError"
		}
		e = ssmErr(code, "%s", f.Message)
	case "servicequotas":
		code := f.Code
		if code == "" {
			code = "ServiceException"
		}
		e = sqErr(code, "%s", f.Message)
	case "logs":
		code := f.Code
		if code == "" {
			code = "ServiceUnavailableException"
		}
		e = logsErr(code, "%s", f.Message)
	case "sts":
		code := f.Code
		if code == "" {
			code = "InternalFailure"
		}
		e = stsErr(code, "%s", f.Message)
	case "iam":
		code := f.Code
		if code == "" {
			code = "ServiceFailure"
		}
		e = iamErr(code, "%s", f.Message)
	default:
		code := f.Code
		if code == "" {
			code = "InternalError"
		}
		e = ec2Err(code, "%s", f.Message)
	}
	if f.Status != 0 {
		e.status = f.Status
	}
	if e.message == "" {
		e.message = "ec2fake: injected " + e.code
	}
	s.answer(w, c, nil, e)
}

// StickInPending keeps an instance in pending (stuck) or lets it go on (false), whatever the clock and the
// polls say.
func (s *Server) StickInPending(region, instanceID string, stuck bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.mustRegion(region).instances[instanceID]; in != nil {
		in.stuck = stuck
	} else {
		s.t.Fatalf("ec2fake: no instance %s in %s", instanceID, region)
	}
}

// StickNextLaunchInPending makes the instances of the next n RunInstances (that launch) never leave pending
// until StickInPending lets them.
func (s *Server) StickNextLaunchInPending(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stickNext += n
}

// Bucket is a token bucket ("Request throttling for the Amazon EC2 API", How throttling is applied): each
// request takes a token; the bucket holds at most Size and gains RefillPerSecond tokens a second on the
// fake's clock; a request that finds it empty is throttled. Buckets are per action and per region, as EC2
// throttles "for each AWS account on a per-Region basis".
type Bucket struct {
	Size            int
	RefillPerSecond float64
}

type bucketState struct {
	Bucket
	tokens float64
	at     float64 // fake clock, seconds
}

// SetThrottle gives action a bucket (full), replacing Options.Throttle's; a zero Bucket removes it.
func (s *Server) SetThrottle(action string, b Bucket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Throttle == nil {
		s.opts.Throttle = map[string]Bucket{}
	}
	throttle := make(map[string]Bucket, len(s.opts.Throttle)+1)
	for k, v := range s.opts.Throttle {
		throttle[k] = v
	}
	if b == (Bucket{}) {
		delete(throttle, action)
	} else {
		throttle[action] = b
	}
	s.opts.Throttle = throttle
	for k := range s.buckets {
		if strings.HasSuffix(k, "/"+action) {
			delete(s.buckets, k)
		}
	}
}

// throttle takes a token for c, or refuses it as the service does when the bucket is empty: EC2 503
// RequestLimitExceeded ("EC2 API Reference: Error codes"), SSM 400 ThrottlingException and STS 400
// Throttling (their Common Errors), Service Quotas 400 TooManyRequestsException (Service Quotas API
// Reference: GetServiceQuota, Errors). The caller holds s.mu.
func (s *Server) throttle(c *call) *apiError {
	b, ok := s.opts.Throttle[c.action]
	if !ok {
		return nil
	}
	key := c.region + "/" + c.action
	now := float64(s.now().UnixNano()) / 1e9
	st := s.buckets[key]
	if st == nil || st.Bucket != b {
		st = &bucketState{Bucket: b, tokens: float64(b.Size), at: now}
		s.buckets[key] = st
	}
	st.tokens = math.Min(float64(b.Size), st.tokens+(now-st.at)*b.RefillPerSecond)
	st.at = now
	if st.tokens >= 1 {
		st.tokens--
		return nil
	}
	s.throttled[c.action]++
	switch c.service {
	case "ssm":
		return ssmErr("ThrottlingException", "Rate exceeded")
	case "sts", "iam":
		return stsErr("Throttling", "Rate exceeded")
	case "servicequotas":
		return sqErr("TooManyRequestsException", "Due to throttling, the request was denied. Slow down the rate of request calls, or request an increase for this quota.")
	}
	return ec2Err("RequestLimitExceeded", "Request limit exceeded.")
}
