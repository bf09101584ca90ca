package ec2fake

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
)

// call is one request on its way through the fake.
type call struct {
	service, region, action string
	accessKey               string     // as signed, verified or not
	principal               *principal // who signed it, once verified
	form                    form       // EC2 and STS
	body                    []byte     // SSM and Service Quotas
	requestID               string
}

// serve is the one endpoint: it tells the service from the request's shape (an X-Amz-Target of Service
// Quotas' prefix is Service Quotas, of CloudWatch Logs' prefix CloudWatch Logs, any other is SSM, a form with STS's API version is STS, with
// IAM's IAM, with ELBv2's Elastic Load Balancing, any other form is EC2), verifies the signature, whose credential
// scope must name that service and gives the region, then answers as that service does.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// Room for CloudWatch Logs' largest batch (1 MB of messages, 10,000 events in JSON); a larger body is
	// refused before it is read.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	c := &call{body: body}
	s.mu.Lock()
	c.requestID = s.requestID()
	s.mu.Unlock()
	if target := r.Header.Get("X-Amz-Target"); strings.HasPrefix(target, sqTargetPrefix) {
		c.service, c.action = "servicequotas", strings.TrimPrefix(target, sqTargetPrefix)
	} else if strings.HasPrefix(target, logsTargetPrefix) {
		c.service, c.action = "logs", strings.TrimPrefix(target, logsTargetPrefix)
	} else if target != "" {
		c.service = "ssm"
		// A target of another service keeps its prefix, and is no SSM action: UnknownOperationException.
		c.action = strings.TrimPrefix(target, ssmTargetPrefix)
	} else {
		v, perr := url.ParseQuery(string(body))
		if perr != nil {
			s.answer(w, c, nil, ec2Err("MalformedQueryString", "The query string is malformed: %v", perr))
			return
		}
		c.form = form{v}
		c.action = c.form.str("Action")
		c.service = "ec2"
		switch c.form.str("Version") {
		case stsVersion:
			c.service = "sts"
		case iamVersion:
			c.service = "iam"
		case elbVersion:
			c.service = "elasticloadbalancing"
		}
	}
	sc, aerr := s.verify(r, body, c.service)
	c.region, c.accessKey, c.principal = sc.region, sc.accessKey, sc.principal
	if aerr != nil {
		s.answer(w, c, nil, aerr)
		return
	}

	// IAM is global: one endpoint, signed for us-east-1 whatever region the caller works in (R56).
	if c.service == "iam" && sc.region != IAMSigningRegion {
		s.answer(w, c, nil, iamErr("SignatureDoesNotMatch", "Credential should be scoped to a valid region, not '%s'. ", sc.region))
		return
	}
	s.mu.Lock()
	rg, served := s.regionOf(sc.region)
	if c.service == "iam" {
		rg, served = nil, true
	}
	if !served || rg != nil && rg.unreachable {
		s.logCall(c, 0, "unreachable")
		s.mu.Unlock()
		dropConnection(w)
		return
	}
	if e := s.checkAction(c); e != nil {
		s.mu.Unlock()
		s.answer(w, c, nil, e)
		return
	}
	f := s.fault(c)
	if f != nil && f.pause != nil && !f.After {
		s.mu.Unlock()
		if !f.pause.Hold() {
			s.dropped(w, c)
			return
		}
		s.mu.Lock()
		f = nil
	}
	if f != nil && !f.After {
		s.mu.Unlock()
		s.applyFault(w, c, f)
		return
	}
	if e := s.throttle(c); e != nil {
		s.mu.Unlock()
		s.answer(w, c, nil, e)
		return
	}
	out, e := s.handle(rg, c)
	s.mu.Unlock()
	if f != nil && f.pause != nil {
		// Handled; held before its answer.
		if !f.pause.Hold() {
			s.dropped(w, c)
			return
		}
		s.answer(w, c, out, e)
		return
	}
	if f != nil {
		// The change is made; its answer is lost (or replaced by the fault's).
		s.write(httptest.NewRecorder(), c, out, e)
		s.applyFault(w, c, f)
		return
	}
	s.answer(w, c, out, e)
}

// checkAction refuses an action the service has not, or the fake does not serve, and an EC2 request with
// parameters its action cannot take. The caller holds s.mu.
func (s *Server) checkAction(c *call) *apiError {
	switch c.service {
	case "ssm":
		if _, ok := ssmActions[c.action]; !ok {
			return ssmErr("UnknownOperationException", "")
		}
		return s.authorizeCall(c)
	case "servicequotas":
		return s.checkSQAction(c)
	case "logs":
		return s.checkLogsAction(c)
	case "iam":
		return s.checkIAMAction(c)
	case "elasticloadbalancing":
		return s.checkELBAction(c)
	case "sts":
		if _, ok := stsActions[c.action]; !ok {
			return stsErr("InvalidAction", "Could not find operation %s for version %s", c.action, stsVersion)
		}
	default:
		if c.action == "" {
			return ec2Err("MissingAction", "The request must contain the parameter Action")
		}
		if _, ok := ec2Actions[c.action]; !ok {
			return ec2Err("InvalidAction", "The action %s is not valid for this web service.", c.action)
		}
		if v := c.form.str("Version"); v != ec2Version {
			return ec2Err("InvalidParameterValue", "Value (%s) for parameter Version is invalid. Expecting %s.", v, ec2Version)
		}
		if e := checkParams(c.action, c.form); e != nil {
			return e
		}
		// Permissions before the dry run, which answers whether the request would be allowed (R5, R51).
		if e := s.authorizeCall(c); e != nil {
			return e
		}
		if dry, _, e := c.form.boolean("DryRun"); e != nil || dry {
			if e != nil {
				return e
			}
			return ec2Err("DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
		}
	}
	return nil
}

// handle runs the action. The caller holds s.mu.
func (s *Server) handle(rg *region, c *call) (any, *apiError) {
	s.advanceAll()
	switch c.service {
	case "ssm":
		return ssmActions[c.action](s, rg, c.body)
	case "servicequotas":
		return sqActions[c.action](s, rg, c)
	case "logs":
		return logsActions[c.action](s, rg, c)
	case "sts":
		return stsActions[c.action](s, rg, c)
	case "iam":
		return iamActions[c.action](s, c)
	case "elasticloadbalancing":
		return elbActions[c.action](s, rg, c)
	}
	return ec2Actions[c.action](s, rg, c.form)
}

// answer logs the call and writes out or e.
func (s *Server) answer(w http.ResponseWriter, c *call, out any, e *apiError) {
	status, code := http.StatusOK, ""
	if e != nil {
		status, code = e.status, e.code
	}
	s.mu.Lock()
	s.logCall(c, status, code)
	s.mu.Unlock()
	s.write(w, c, out, e)
}

// write writes out or e in the service's form.
func (s *Server) write(w http.ResponseWriter, c *call, out any, e *apiError) {
	switch c.service {
	case "ssm", "logs":
		if e != nil {
			writeJSONError(w, e, c.requestID, "message")
		} else {
			writeJSON(w, out, c.requestID)
		}
	case "servicequotas":
		if e != nil {
			writeJSONError(w, e, c.requestID, "Message")
		} else {
			writeJSON(w, out, c.requestID)
		}
	case "sts":
		if e != nil {
			writeQueryError(w, stsNamespace, e, c.requestID, false)
		} else {
			writeQueryAnswer(w, stsNamespace, c.action, out, c.requestID)
		}
	case "iam":
		if e != nil {
			writeQueryError(w, iamNamespace, e, c.requestID, true)
		} else {
			writeQueryAnswer(w, iamNamespace, c.action, out, c.requestID)
		}
	case "elasticloadbalancing":
		if e != nil {
			writeQueryError(w, elbNamespace, e, c.requestID, true)
		} else {
			writeQueryAnswer(w, elbNamespace, c.action, out, c.requestID)
		}
	default:
		if e != nil {
			writeEC2Error(w, e, c.requestID)
		} else {
			writeEC2(w, c.action, c.requestID, out)
		}
	}
}

// logCall records a call. The caller holds s.mu.
func (s *Server) logCall(c *call, status int, code string) {
	s.log = append(s.log, Request{Service: c.service, Region: c.region, Action: c.action, Status: status, Code: code, AccessKey: c.accessKey, Time: s.now()})
}

func (s *Server) requestID() string {
	s.seq++
	return fmt.Sprintf("ec2fake0-0000-4000-8000-%012x", s.seq)
}

// dropped logs c as dropped and closes its connection unanswered.
func (s *Server) dropped(w http.ResponseWriter, c *call) {
	s.mu.Lock()
	s.logCall(c, 0, "dropped")
	s.mu.Unlock()
	dropConnection(w)
}

// dropConnection closes the connection without an answer: an endpoint that cannot be reached, or an
// answer lost on the way.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
