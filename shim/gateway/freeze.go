package gateway

// This file is the fence a freeze is made behind (doc.go, "Freezes").
//
// The cgroup freezer ends a task's wait in the trap as a signal would
// (its notification is cancelled and the call restarts when thawed), but
// the kernel reports nothing: no signal is queued, none is taken. An
// answer sent as plain SEND to a task being frozen can be refused (the
// notification is gone) or, in a window of the kernel's, discarded after
// it was accepted; and with no report, what the gateway keeps for a
// restart (Request.keepForRestart) is never given to it. So while a
// freeze is being made no answer goes out as a plain SEND:
//
//   - an answer of 0 goes through ADDFD|SEND (Request.confirm): the
//     kernel says whether the task took it;
//   - any other answer is parked on its call (Request.kept), and a
//     commit that cannot be confirmed (msgrcv's message, a task without
//     fd 0) is refused and its call parked to be served again
//     (Request.withheld): the engine undoes it, the message stays queued.
//
// At the fence's end (the freeze is done: every task it froze has lost
// its notification; or it failed) each parked call is settled: a call
// still pending is answered, or served again; a call whose notification
// is gone keeps its answer on the thread, for the restart that follows
// the thaw (Gateway.restart gives an interruption's origin's kept answer
// to the restart).

// Freezing tells the gateway that tasks it serves are about to be frozen
// (a freeze of unknown scope: every listener is fenced; the shim's Pause
// uses FreezingContainer): from now on no answer goes out as a plain SEND
// (see above). It returns the fence's end, to be called once the freeze
// is done (after Frozen) or has failed; calls after the first do
// nothing. Fences nest: a parked call is settled when the last fence
// over its listener ends.
//
// The fence is not kept while the tasks stay frozen: once the freeze is
// done no frozen task has a notification left (the freezer cancelled
// them all) and none can make a call, so answers to the tasks that still
// call need none; the restarts that follow the thaw get what was kept
// for them. Nothing is needed at the resume.
func (g *Gateway) Freezing() (end func()) { return g.freezing("") }

// FreezingContainer is Freezing for the tasks of container id: the fence
// covers the calls of the listeners served with ListenerOptions.Container
// id, and of those served with none (their container is unknown), not
// the other containers': those answers neither wait for runc pause nor go
// through ADDFD meanwhile. The freezer freezes the container's cgroup,
// and a task of it makes its calls through its container's listeners
// (runc hands the shim one per process it starts: init and each exec).
func (g *Gateway) FreezingContainer(id string) (end func()) {
	if id == "" {
		return g.Freezing()
	}
	return g.freezing(id)
}

func (g *Gateway) freezing(id string) (end func()) {
	// The write lock waits for every plain SEND under way (sendUnfenced
	// holds the read lock across its check and its SEND): once it is
	// taken, none that could meet the freezer is left.
	g.fenceMu.Lock()
	g.fences++
	if id == "" {
		g.fenceAll++
	} else {
		if g.fenceOf == nil {
			g.fenceOf = make(map[string]int)
		}
		g.fenceOf[id]++
	}
	g.fencedNow.Store(true)
	g.fenceMu.Unlock()
	var ended bool
	return func() {
		g.fenceMu.Lock()
		if ended {
			g.fenceMu.Unlock()
			return
		}
		ended = true
		g.fences--
		if id == "" {
			g.fenceAll--
		} else if g.fenceOf[id]--; g.fenceOf[id] == 0 {
			delete(g.fenceOf, id)
		}
		g.fencedNow.Store(g.fences > 0)
		// The calls no fence covers any more are settled; the others
		// wait for theirs.
		var settle []*Request
		left := g.parked[:0]
		for _, c := range g.parked {
			if g.fencedLocked(c.ls) {
				left = append(left, c)
			} else {
				settle = append(settle, c)
			}
		}
		clear(g.parked[len(left):])
		g.parked = left
		g.fenceMu.Unlock()
		for _, c := range settle {
			g.unpark(c)
		}
	}
}

// fencedLocked reports whether a fence covers listener ls. fenceMu is
// held.
func (g *Gateway) fencedLocked(ls *listener) bool {
	if g.fences == 0 {
		return false
	}
	if g.fenceAll > 0 {
		return true
	}
	c := ls.opts.Container
	return c == "" || g.fenceOf[c] > 0
}

// fenced reports whether a fence covers r's listener (a hint: sendUnfenced
// decides under fenceMu). It takes no lock while no fence is up.
func (r *Request) fenced() bool {
	g := r.g
	if !g.fencedNow.Load() {
		return false
	}
	g.fenceMu.RLock()
	defer g.fenceMu.RUnlock()
	return g.fencedLocked(r.ls)
}

// sendUnfenced sends a as a plain SEND unless a freeze is being made;
// then it parks the call instead (sent false, parked true): with a kept
// for the freeze's end, or, if withhold, to be served again.
func (r *Request) sendUnfenced(a answer, withhold bool) (sent, parked bool) {
	g := r.g
	g.fenceMu.RLock()
	defer g.fenceMu.RUnlock()
	if g.fencedLocked(r.ls) {
		r.parkLocked(a, withhold)
		return false, true
	}
	return r.send(a.val, a.errno), false
}

// parkIfFenced parks r, to be served again, if a freeze is being made,
// and reports whether it did.
func (r *Request) parkIfFenced() bool {
	if !r.g.fencedNow.Load() {
		return false
	}
	g := r.g
	g.fenceMu.RLock()
	defer g.fenceMu.RUnlock()
	if g.fencedLocked(r.ls) {
		r.parkLocked(answer{}, true)
		return true
	}
	return false
}

// keep keeps a, the answer of a call that did not take it, for the
// call's restart: parked while a freeze is being made, otherwise until
// the restart (keepForRestart).
func (r *Request) keep(a answer) {
	g := r.g
	g.fenceMu.RLock()
	fenced := g.fencedLocked(r.ls)
	if fenced {
		r.parkLocked(a, false)
	}
	g.fenceMu.RUnlock()
	if !fenced {
		r.keepForRestart(a)
	}
}

// parkLocked parks r until the fence's end: with its answer a kept, or
// withheld, to be served again. The call stays its thread's call
// (finish leaves it). fenceMu is held for reading.
func (r *Request) parkLocked(a answer, withhold bool) {
	if withhold {
		r.withheld.Store(true)
	} else {
		r.kept.Store(&a)
	}
	g := r.g
	g.parkMu.Lock()
	g.parked = append(g.parked, r)
	g.parkMu.Unlock()
	g.Stats.Parked.Add(1)
}

// parked reports whether r waits for a fence's end.
func (r *Request) parked() bool { return r.kept.Load() != nil || r.withheld.Load() }

// unpark settles c, parked while a freeze was made, once the fence is
// down. It holds c.serving meanwhile, so that the thread's next call
// (the restart of c, if the freezer took the thread) waits for the
// outcome (Gateway.restart) instead of running c anew while its answer
// is being sent.
func (g *Gateway) unpark(c *Request) {
	c.serving.Lock()
	defer c.serving.Unlock()
	if c.Valid() == nil {
		// The task still waits (the freeze did not take it, or failed):
		// answer it now, or serve it again.
		if a := c.kept.Swap(nil); a != nil {
			c.answering.Lock()
			c.deliver(*a)
			c.answering.Unlock()
			c.finish()
			return
		}
		if c.withheld.Swap(false) {
			g.serveAgain(c)
		}
		return
	}
	// The freezer (or a signal) ended the wait: the thread's restart of
	// c gets c's answer.
	c.withheld.Store(false)
	if a := c.kept.Load(); a != nil {
		c.keepGone(a)
	}
}

// keepGone gives a, the answer kept for r (r.kept), whose notification is
// gone, to r's interruption, for the restart: the one the kernel
// reported, or, with no report (a freeze), one recorded here as
// callOverLocked would record it when the restart comes. Under evMu and
// the Task's lock, as restart takes r.kept: exactly one of them does. If
// neither fits, a stays on r, for restart to find on the interruption
// whose origin r is.
func (r *Request) keepGone(a *answer) {
	g, t := r.g, r.Task
	g.evMu.Lock()
	defer g.evMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !r.kept.CompareAndSwap(a, nil) {
		return // the restart took it
	}
	switch in := t.intr; {
	case in != nil && in.origin == r:
		// Reported (a signal), or judged gone by a newer call.
		if in.resend == nil {
			in.resend = a
		}
	case in == nil && t.call == r && !r.answered.Load():
		// Gone with no report.
		r.gone.Store(true)
		t.call = nil
		t.intr = &interruption{call: r, origin: r, slept: r.wait != nil, resend: a}
	default:
		r.kept.Store(a)
	}
}

// serveAgain serves c, whose commit was refused while a freeze was being
// made, again: the task still waits. A new Request takes c's place (c's
// answer was claimed), with c's registers and flags.
func (g *Gateway) serveAgain(c *Request) {
	t := c.Task
	r := &Request{Notif: c.Notif, Sysno: c.Sysno, Task: t, g: g, ls: c.ls, recvSeq: c.recvSeq,
		cached: c.cached, restarted: c.restarted, obsStart: c.obsStart}
	r.serving.Lock()
	defer r.serving.Unlock()
	t.mu.Lock()
	if t.call != c || c.gone.Load() {
		t.mu.Unlock()
		return
	}
	t.call = r
	t.mu.Unlock()
	g.Stats.ServedAgain.Add(1)
	e, err := g.engines.EnginesOf(t)
	if err != nil {
		r.Reply(0, err)
		return
	}
	call(e, r)
}
