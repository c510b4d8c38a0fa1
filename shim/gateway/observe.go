package gateway

import (
	"time"

	"golang.org/x/sys/unix"
)

// Observer is told about every answered trapped call: the metrics hook.
// ObserveReply runs on the answering goroutine (the listener's receive
// goroutine for a call answered at once, the blocked call's goroutine or
// a waker's Commit for one that slept), after the answer went to the
// kernel, so it must be quick, must not block and should not allocate. It
// is not called for calls refused before they reach a handler (unknown
// syscall, a task the gateway cannot identify), nor for the rare
// confirmed deliveries (Gateway.ExactDelivery) whose confirmation was lost
// or that fell back to a plain SEND; other confirmed deliveries are
// reported from Deliver.
type Observer interface {
	ObserveReply(r *Request, errno unix.Errno, elapsed time.Duration)
}

// SetObserver installs o (nil removes it). Set it before Serve.
func (g *Gateway) SetObserver(o Observer) { g.obs = o }

// epoch is the base of Request.obsStart: time.Since(epoch) reads only the
// monotonic clock.
var epoch = time.Now()

// observeStart stamps r with the time its dispatch began, when an
// observer is installed.
func (g *Gateway) observeStart(r *Request) {
	if g.obs != nil {
		r.obsStart = int64(time.Since(epoch))
	}
}

// observeReply reports r's answer to the observer. Answers the kernel
// refused (the task left) are not reported.
func (g *Gateway) observeReply(r *Request, errno unix.Errno, serr error) {
	if g.obs != nil && serr == nil {
		g.obs.ObserveReply(r, errno, time.Duration(int64(time.Since(epoch))-r.obsStart))
	}
}
