package computefake

import (
	"fmt"
	"net/http"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// operation is one long-running operation: RUNNING until doneAt, then finish runs once and it is DONE.
type operation struct {
	proto  *computepb.Operation
	doneAt time.Time
	finish func() *computepb.Error
	done   chan struct{}
}

// startOp records an operation on target in scope ("zones/z" or "regions/r"). finish applies the change
// when the operation completes and may return the operation's error.
func (s *Server) startOp(project, scope, kind, target string, finish func() *computepb.Error) *computepb.Operation {
	s.seq++
	name := fmt.Sprintf("operation-%d-%d", s.now().UnixNano(), s.seq)
	now := s.now()
	op := &computepb.Operation{
		Name:          proto.String(name),
		Id:            proto.Uint64(s.seq),
		OperationType: proto.String(kind),
		TargetLink:    proto.String(s.link(project, target)),
		Status:        computepb.Operation_RUNNING.Enum(),
		InsertTime:    proto.String(now.Format(time.RFC3339)),
		StartTime:     proto.String(now.Format(time.RFC3339)),
		SelfLink:      proto.String(s.link(project, scope+"/operations/"+name)),
		Progress:      proto.Int32(0),
	}
	if len(scope) > 6 && scope[:6] == "zones/" {
		op.Zone = proto.String(s.link(project, scope))
	} else {
		op.Region = proto.String(s.link(project, scope))
	}
	o := &operation{proto: op, doneAt: now.Add(s.opts.OperationLatency), finish: finish, done: make(chan struct{})}
	s.ops[key(project, scope, name)] = o
	s.advance()
	return clone(op)
}

// advance completes every operation whose time has come. The caller holds s.mu.
func (s *Server) advance() {
	now := s.now()
	for _, o := range s.ops {
		if o.finish == nil || now.Before(o.doneAt) {
			continue
		}
		if e := o.finish(); e != nil {
			o.proto.Error = e
			o.proto.HttpErrorStatusCode = proto.Int32(http.StatusBadRequest)
			o.proto.HttpErrorMessage = proto.String("BAD REQUEST")
			if len(e.Errors) > 0 && e.Errors[0].GetCode() == "QUOTA_EXCEEDED" {
				o.proto.HttpErrorStatusCode = proto.Int32(http.StatusForbidden)
				o.proto.HttpErrorMessage = proto.String("FORBIDDEN")
			}
		} else if hook := s.opts.OnOperationDone; hook != nil {
			go hook(o.proto.GetOperationType(), o.proto.GetTargetLink())
		}
		o.finish = nil
		o.proto.Status = computepb.Operation_DONE.Enum()
		o.proto.Progress = proto.Int32(100)
		o.proto.EndTime = proto.String(now.Format(time.RFC3339))
		close(o.done)
	}
}

// getOp answers operations.get, and operations.wait, which blocks until DONE or about two minutes, as the API does.
func (s *Server) getOp(w http.ResponseWriter, r *http.Request, project, scope, name string, wait bool) {
	s.mu.Lock()
	s.advance()
	o, ok := s.ops[key(project, scope, name)]
	if !ok {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource 'projects/%s/%s/operations/%s' was not found", project, scope, name))
		return
	}
	if wait && o.finish != nil {
		until := time.Until(o.doneAt)
		s.mu.Unlock()
		t := time.NewTimer(until)
		select {
		case <-t.C:
		case <-r.Context().Done():
		case <-time.After(2 * time.Minute):
		}
		t.Stop()
		s.mu.Lock()
		s.advance()
	}
	op := clone(o.proto)
	s.mu.Unlock()
	writeProto(w, op)
}

func opError(code, message string, details ...*computepb.ErrorDetails) *computepb.Error {
	return &computepb.Error{Errors: []*computepb.Errors{{Code: proto.String(code), Message: proto.String(message), ErrorDetails: details}}}
}

func clone[T proto.Message](m T) T {
	c, _ := proto.Clone(m).(T) // a clone has the type of what it cloned
	return c
}
