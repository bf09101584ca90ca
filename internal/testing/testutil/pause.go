package testutil

import "sync"

// Pause holds one request in a fake service until the test lets it go on or drops it, so that a test acts at
// a known point of a client's sequence of requests (kills the client while that request is in flight) by the
// event, not by a guessed duration. The fakes of the cloud APIs (ec2fake, computefake) arm it on a request and
// call Hold where the request is to wait.
type Pause struct {
	reached chan struct{}
	end     chan bool // true: go on; false: drop
	once    sync.Once
}

// NewPause returns a pause no request waits on yet.
func NewPause() *Pause {
	return &Pause{reached: make(chan struct{}), end: make(chan bool, 1)}
}

// Reached is closed once the paused request waits.
func (p *Pause) Reached() <-chan struct{} { return p.reached }

// Resume lets the held request go on as if it had not been held.
func (p *Pause) Resume() { p.finish(true) }

// Drop closes the held request's connection unanswered. A request held before it was handled is then never
// handled (its client gave up, or died, before the service acted on it); one held after keeps its change,
// and its answer is lost.
func (p *Pause) Drop() { p.finish(false) }

func (p *Pause) finish(resume bool) { p.once.Do(func() { p.end <- resume }) }

// Hold makes the request wait, and reports true once Resume is called, false once Drop is. The fake calls it
// without holding its own lock.
func (p *Pause) Hold() bool {
	close(p.reached)
	return <-p.end
}
