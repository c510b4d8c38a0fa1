package gateway

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/msgengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
	"golang.org/x/sys/unix"
)

// Request is one trapped call.
type Request struct {
	// Notif is the notification as received.
	Notif seccompnotify.Notif
	// Sysno is the decoded call.
	Sysno Sysno
	// Task is the caller.
	Task *Task

	g  *Gateway
	ls *listener
	// recvSeq is the event sequence number when the call was dispatched:
	// every event up to it had been applied.
	recvSeq uint64
	// cached: Task came from the cache (identified before this call).
	cached bool
	// restarted: the call is the restart of a call the kernel
	// interrupted where, natively, it may or may not have slept: it is
	// served, but where it would sleep it fails with EINTR instead.
	restarted bool

	// replied is set once an answer was attempted (only the first
	// counts), answered once the kernel accepted one, gone once the
	// notification is known to be gone (the task was interrupted or
	// died).
	replied, answered, gone atomic.Bool
	// answering is held from the moment an answer is attempted until
	// its outcome (answered or gone) is recorded, so that whoever must
	// tell an answered call from a vanished one can wait for it
	// (settle): the task may make its next call before the goroutine
	// that answered it has run again.
	answering sync.Mutex
	// serving is held by the receiver while it serves the call
	// (dispatch): the thread's next call, which may be this one's
	// restart read by another receiver, waits for this one's outcome
	// (Gateway.restart).
	serving sync.Mutex
	// observing is held while a handler that Observe deferred runs.
	observing sync.Mutex
	// wait is the engine sleep the call is in, if any; guarded by
	// Task.mu.
	wait canceler
	// kept is the call's answer, parked while a freeze was being made
	// (freeze.go), and withheld says that the call's commit was refused
	// then, to be served again. Set under the fence's read lock; taken
	// (swapped out) by the fence's end (unpark) or by the thread's
	// restart (Gateway.restart), under evMu and Task.mu when the
	// notification is gone. A parked call stays its thread's call.
	kept     atomic.Pointer[answer]
	withheld atomic.Bool
	// sentAt is when the kernel accepted the answer (CLOCK_MONOTONIC
	// ns, read as the SEND returned): a signal queued later cannot have
	// made it discard the answer (taken). Written by the answering
	// goroutine, before answered.
	sentAt int64

	obsStart int64 // observe.go
}

type canceler interface{ Cancel() bool }

// answer is a call's return value or errno, as sent.
type answer struct {
	val   int64
	errno unix.Errno
}

// Arg returns the i-th argument register.
func (r *Request) Arg(i int) uint64 { return r.Notif.Data.Args[i] }

// Valid checks that the notification is still pending (ID_VALID): the
// caller still waits, so everything learnt through its tid is its, and an
// answer can reach it. An error means the task left (a signal or death).
func (r *Request) Valid() error { return r.ls.l.IDValid(r.Notif.ID) }

// Bound reports that the Task was identified before this notification
// and is still alive: the notification is the Task's without an ID_VALID.
func (r *Request) Bound() bool { return r.cached && !r.Task.dead.Load() }

// Replied reports whether an answer was sent (or attempted).
func (r *Request) Replied() bool { return r.replied.Load() }

// Reply answers the call with val, or with err if it is not nil (a
// syscall.Errno; any other error is logged and answered with EIO), and
// reports whether the kernel accepted the answer. Only the first answer
// counts. Use it for answers that change nothing, or whose change is
// harmless to repeat: an accepted answer can still be discarded when a
// signal reaches the task at that instant (then the task sees EINTR or
// restarts the call). Answers that change state go through commit.
func (r *Request) Reply(val int64, err error) bool {
	if !r.startAnswer() {
		return false
	}
	defer r.answering.Unlock()
	var errno unix.Errno
	if err != nil && !errors.As(err, &errno) {
		r.g.logf("gateway: %v from tid %d: %v", r.Sysno, r.Task.Tid, err)
		errno = unix.EIO
	}
	ok := r.deliver(answer{val, errno})
	r.finish()
	return ok
}

// deliver sends a, an answer whose effects (an IPC_RMID, a SETVAL, a set
// created, a sleeper's EIDRM) are already done, and learns whether the
// task took it as commit does (doc.go, "Exact answers"). If the kernel
// discarded it (a signal woke the task as the SEND went in), the call
// restarts when the handler has SA_RESTART, or after a stop: natively it
// completed, so its restart gets a again (Gateway.restart) instead of
// running a second time (an IPC_RMID failing with EINVAL, a second set
// created). It must run before finish: the kernel's report of the
// interruption is bound to the call while it is the Task's.
//
// While a freeze is being made (Gateway.Freezing) no answer is a plain
// SEND: 0 goes through ADDFD|SEND, any other answer is parked on the call
// until the fence's end (freeze.go).
func (r *Request) deliver(a answer) bool {
	r.g.beforeAnswer(r)
	pre, raced := r.fateWindow()
	if (raced || r.fenced()) && a == (answer{}) {
		if ok, done := r.confirm(); done {
			if !ok {
				r.keep(a)
			}
			return ok
		}
	}
	sent, parked := r.sendUnfenced(a, false)
	if parked {
		return false
	}
	if sent && r.taken(pre, raced) {
		return true
	}
	if r.gone.Load() {
		// Refused (the task left before the SEND) or discarded.
		r.keep(a)
	}
	return false
}

// keepForRestart keeps a, the answer of a call that did not take it, for
// the call's restart: on the kernel's report of the interruption, which
// comes before the restart (the thread takes the signal first) but may
// be applied before or after this.
func (r *Request) keepForRestart(a answer) {
	t := r.Task
	// evMu: the kernel's reports update an interruption (its resend too,
	// when one ends a restart before the gateway read it: events.go).
	r.g.evMu.Lock()
	defer r.g.evMu.Unlock()
	t.mu.Lock()
	if in := t.intr; in != nil && (in.call == r || in.call == nil && in.matches(r)) {
		// Reported already: r's interruption, or that of r's restart,
		// interrupted before the gateway read it (the thread makes no
		// call with r's registers in between).
		in.resend = &a
	} else {
		t.resend = &pendingAnswer{call: r, a: a}
	}
	t.mu.Unlock()
}

// pendingAnswer is an answer kept for a call's restart until the
// kernel's report of the call's interruption is applied.
type pendingAnswer struct {
	call *Request
	a    answer
}

// fateWindow opens the window in which the fate of an answer sent next
// is judged: it applies the events recorded so far, and returns the
// count of events applied (pre) and whether a signal may race with the
// answer. The thread's first signal after pre is recorded for await.
func (r *Request) fateWindow() (pre uint64, raced bool) {
	r.g.syncEventsLocked()
	t := r.Task
	t.mu.Lock()
	pre = r.g.seqNow.Load()
	t.sigFrom = pre
	t.mu.Unlock()
	return pre, r.g.mayBeSignalled(t.proc, r.recvSeq)
}

// startAnswer claims the right to answer (only the first answer counts)
// and, if it got it, returns with answering held.
func (r *Request) startAnswer() bool {
	r.answering.Lock()
	if !r.replied.CompareAndSwap(false, true) {
		r.answering.Unlock()
		return false
	}
	return true
}

// settle waits until an answer in flight has its outcome recorded:
// afterwards answered and gone say whether the kernel took it. No
// gateway lock may be held (an answer in flight may need evMu).
func (r *Request) settle() {
	if r.replied.Load() {
		r.answering.Lock()
		//lint:ignore SA2001 a wait for the answering goroutine, not a critical section
		r.answering.Unlock()
	}
}

// awaitServed waits until r's receiver has served it (answered it, or
// left it asleep in an engine) and any answer in flight has its outcome
// recorded. No gateway lock may be held.
func (r *Request) awaitServed() {
	r.serving.Lock()
	//lint:ignore SA2001 a wait for the serving receiver, not a critical section
	r.serving.Unlock()
	// A handler deferred by Observe that has not started yet checks that
	// r is still pending (Valid) first: it does nothing for a call whose
	// restart is being served.
	r.observing.Lock()
	//lint:ignore SA2001 a wait for the deferred handler, not a critical section
	r.observing.Unlock()
	r.settle()
}

// send does the SEND ioctl and records its outcome.
func (r *Request) send(val int64, errno unix.Errno) bool {
	serr := r.ls.l.Reply(r.Notif.ID, val, errno)
	r.sentAt = tasktrace.Now()
	r.g.observeReply(r, errno, serr)
	if serr != nil {
		if seccompnotify.IsGone(serr) {
			r.gone.Store(true)
		} else {
			r.g.logf("gateway: reply to tid %d: %v", r.Task.Tid, serr)
		}
		return false
	}
	r.answered.Store(true)
	return true
}

// finish ends the call's presence in its Task: the thread's next
// notification is a new call. A call parked while a freeze is being made
// stays (freeze.go): its restart takes its answer.
func (r *Request) finish() {
	t := r.Task
	t.mu.Lock()
	if t.call == r && !r.parked() {
		t.call = nil
	}
	t.mu.Unlock()
}

// sleep records that the call is asleep in an engine (w). If the call is
// already known gone, the sleep is cancelled at once.
func (r *Request) sleep(w canceler) {
	t := r.Task
	t.mu.Lock()
	gone := r.gone.Load()
	if !gone {
		r.wait = w
	}
	t.mu.Unlock()
	if gone {
		w.Cancel()
	}
}

// Slept reports whether the call went to sleep in an engine: its latency
// includes the time it waited.
func (r *Request) Slept() bool {
	t := r.Task
	t.mu.Lock()
	defer t.mu.Unlock()
	return r.wait != nil
}

// matchesRegs reports whether regs (a thread's registers as the kernel
// reported them) are those of this call: number, arguments, instruction
// pointer.
func (r *Request) matchesRegs(regs *tasktrace.Regs) bool {
	d := &r.Notif.Data
	return int64(d.Nr) == int64(regs.OrigAx) && d.InstructionPointer == regs.IP && d.Args == regs.Args(d.Arch == archI386)
}

// commit answers a call whose success changes state (a semop, a msgsnd:
// answer 0; a msgrcv: its byte count, see commitMessage) from the
// engine's Commit, with the engine's lock held, and reports whether the
// task took the answer: if not, the engine undoes the change before
// anyone sees it. It is exact (doc.go, "Exact answers"): a plain SEND,
// unless a signal may race with it; then a confirmed delivery
// (SECCOMP_IOCTL_NOTIF_ADDFD with SEND), or, where the answer is not 0,
// a SEND whose fate the kernel reports (await). While a freeze is being
// made, 0 is confirmed, and an answer that cannot be is refused and the
// call parked, to be served again at the fence's end (freeze.go).
func (r *Request) commit(val int64) bool {
	pre, raced, ok := r.claimCommit()
	if !ok {
		return false
	}
	defer r.answering.Unlock()
	r.g.beforeAnswer(r)
	if (raced || r.fenced()) && val == 0 {
		if ok, done := r.confirm(); done {
			return ok
		}
	}
	sent, parked := r.sendUnfenced(answer{val: val}, true)
	if parked || !sent {
		return false
	}
	return r.taken(pre, raced)
}

// claimCommit claims the answer for commit or commitWrite and checks that
// the call can still take one. On success r.answering is held (the
// caller unlocks it), pre is the count of events applied before the
// answer, and raced says whether a signal may race with it.
func (r *Request) claimCommit() (pre uint64, raced, ok bool) {
	if r.gone.Load() || !r.startAnswer() {
		return 0, false, false
	}
	r.g.syncEventsLocked()
	if r.gone.Load() || r.bindCheck() != nil {
		// Gone, or (a Task not yet bound) its tid may name another task
		// now: nothing is written, the message stays.
		r.answering.Unlock()
		return 0, false, false
	}
	pre, raced = r.fateWindow()
	return pre, raced, true
}

// taken reports whether the answer just sent, claimed when pre events
// were applied, was taken by the task.

func (r *Request) taken(pre uint64, raced bool) bool {
	if h := takenHook.Load(); h != nil {
		(*h)(r)
	}
	if !raced {
		r.g.syncEventsLocked()
		if !r.g.signalQueuedBefore(r.Task.proc, pre, r.sentAt) {
			// No signal was queued for the process before the SEND
			// completed: the kernel cannot have discarded the answer.
			// One queued after it (found by this drain) reaches the
			// thread with the answer in ax, or in its next call: read
			// from that call's interruption, the answer would look
			// discarded (TestAwaitAfterSendDifferential).
			return true
		}
	}
	return r.await(pre)
}

// confirm answers 0 through ADDFD|SEND (seccompnotify.ReplyZeroConfirmed):
// the ioctl returns once the task took the answer, or fails if a signal
// got there first. done is false when it could not be tried (the task
// has no fd 0): the caller then sends and awaits.
func (r *Request) confirm() (ok, done bool) {
	// The thread's own fd 0: a thread may have a file table of its own
	// (unshare(CLONE_FILES), clone without CLONE_FILES), and pidfd_getfd
	// reads the table of the task the pidfd names (the leader, for a
	// process's pidfd), while ADDFD installs into the caller's.
	pfd, err := unix.PidfdOpen(r.Task.Tid, unix.PIDFD_THREAD)
	if err != nil {
		return false, false
	}
	src, err := unix.PidfdGetfd(pfd, 0, 0)
	unix.Close(pfd)
	if err != nil {
		return false, false
	}
	defer unix.Close(src)
	g := r.g
	err = r.ls.l.ReplyZeroConfirmed(r.Notif.ID, src)
	switch {
	case err == nil:
		g.Stats.Confirmed.Add(1)
		g.observeReply(r, 0, nil)
		r.answered.Store(true)
		return true, true
	case errors.Is(err, seccompnotify.ErrUnconfirmed):
		g.Stats.Unconfirmed.Add(1)
		r.answered.Store(true)
		return true, true
	case seccompnotify.IsGone(err):
		g.Stats.Refused.Add(1)
		r.gone.Store(true)
		return false, true
	}
	return false, false
}

// awaitLimit bounds how long an answer in doubt waits for the kernel's
// report: the task was woken by the signal and has only to run.
const awaitLimit = 50 * time.Millisecond

// await learns whether the task took an answer the kernel accepted while
// a signal queued for its process may have woken it (event sequence
// number pre, before the SEND). A task woken by a signal takes it in
// get_signal, where the kernel reports its registers: ax holds the
// answer if the task took it, -ERESTARTSYS if it discarded it. It reports
// whether the task took it. The engine's lock is held meanwhile, so an
// answer found discarded is undone before anyone sees it.
func (r *Request) await(pre uint64) bool {
	g, t := r.g, r.Task
	g.Stats.Awaited.Add(1)
	deadline := time.Now().Add(awaitLimit)
	// Read after the SEND returned and before the drain below: a signal
	// that made the kernel discard the answer was pending for the thread,
	// unblocked, before the SEND completed; it is still pending now, or
	// the thread took it, and signal_deliver's report, written under the
	// same lock as /proc's read, is then drained below.
	quiet := !signalDeliverable(t.Tid)
	for {
		g.evMu.Lock()
		g.drainLocked()
		drained := g.drained
		g.evMu.Unlock()
		t.mu.Lock()
		seq, regs := t.sigSeq, t.sigRegs
		t.mu.Unlock()
		switch {
		case seq > pre:
			if regs.Interrupted() && r.matchesRegs(&regs) {
				g.Stats.Discarded.Add(1)
				r.gone.Store(true)
				return false
			}
			return true
		case t.dead.Load():
			return true
		case t.proc.sigDel.Load() > pre && t.proc.sigDel.Load() >= g.lastSignal(t.proc):
			// Every signal queued for the process since was taken, by
			// other threads: none interrupted this one.
			return true
		case quiet:
			// No signal could interrupt the thread (those pending are
			// blocked, or were taken through signalfd or sigwaitinfo,
			// which signal_deliver does not report), and it took none.
			return true
		case time.Now().After(deadline):
			// No signal reached this thread (another thread took it,
			// or it is blocked): the answer was taken.
			g.Stats.Unsettled.Add(1)
			return true
		}
		select {
		case <-drained:
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// started finishes a handler's call of an engine's Start: asleep (w not
// nil), done (the answer went through Commit, or nobody took it), refused
// as a restarted call that would sleep (EINTR: natively it slept and the
// signal ended the sleep), or failed.
func started[W interface {
	*semengine.Wait | *msgengine.Wait
	canceler
}](r *Request, w W, err, notDelivered, wouldSleep error) {
	switch {
	case w != nil:
		r.sleep(w)
	case err == nil || errors.Is(err, notDelivered):
		r.finish()
	case errors.Is(err, wouldSleep):
		r.g.Stats.Restarts.Add(1)
		r.Reply(0, unix.EINTR)
	default:
		r.Reply(0, err)
	}
}

// ended is an engine sleep's Done: the call was answered through Commit
// (or nobody took it), or the sleep failed (EIDRM, EAGAIN on timeout,
// E2BIG, EACCES, EINTR), which is answered here.
func (r *Request) ended(err error) {
	if err == nil || r.Replied() {
		r.finish()
		return
	}
	if r.gone.Load() {
		r.finish()
		return
	}
	r.Reply(0, err)
}

// commitWrite is commit for an answer that comes with data written into
// the caller's memory first (msgrcv's message: n bytes at addr, written
// by write). If the answer is not taken, the data written is put back as
// it was (the old bytes are read first). A write that faults is answered
// EFAULT and counts as taken, as Linux consumes a message whose copy-out
// fails. While a freeze is being made nothing is written: the commit is
// refused (the message stays where it was) and the call parked, to be
// served again at the fence's end (freeze.go). Where a signal may race
// with the answer, byKernel (if not nil) answers instead and reports
// whether the thread took the answer (vehicle.go), or fails having
// answered nothing.
func (r *Request) commitWrite(val int64, addr uint64, n int, write func() error, byKernel func(pre uint64) (bool, error)) bool {
	pre, raced, ok := r.claimCommit()
	if !ok {
		return false
	}
	defer r.answering.Unlock()
	r.g.beforeAnswer(r)
	lately := byKernel != nil && !raced && r.Task.proc.signalledLately()
	if byKernel != nil && (raced || lately) {
		// A signal may race with the answer, or the process was
		// signalled lately and one may come during it: the kernel
		// carries it and tells its fate (vehicle.go).
		taken, err := byKernel(pre)
		if err == nil {
			if lately {
				r.g.Stats.ByKernelLately.Add(1)
			}
			return taken
		}
		if raced {
			r.g.Stats.NoVehicle.Add(1)
		}
	}
	var saved []byte
	restore := func() {
		if saved != nil {
			_ = r.Task.WriteMem(addr, saved)
		}
	}
	// No write while a freeze is being made: the commit is refused and
	// the call parked, to be served again (freeze.go).
	g := r.g
	if r.parkIfFenced() {
		return false
	}
	// What the buffer held, put back if the task does not take the
	// answer: natively a msgrcv that fails wrote nothing. Saved whether
	// or not a signal may race: a SEND is refused too when a signal
	// comes after the check (TestMsgrcvInterruptedBuffer), and the
	// commit is refused when a fence rises during the write.
	saved = make([]byte, n)
	if r.Task.ReadMem(addr, saved) != nil {
		saved = nil
	}
	// The write is made outside the fence's read lock: it can fault in
	// the caller's pages (swap, a file mapping served by a FUSE daemon in
	// a frozen container), and a Freezing waiting for the lock would hold
	// up every answer of every container meanwhile. The lock covers the
	// check and the SEND only; a freeze begun during the write refuses
	// the commit, and the bytes written are put back.
	if err := write(); err != nil {
		// Linux consumed the message: EFAULT, kept for the fence's end
		// if one is up.
		r.sendUnfenced(answer{errno: unix.EFAULT}, false)
		return true
	}
	g.fenceMu.RLock()
	if g.fencedLocked(r.ls) {
		r.parkLocked(answer{}, true)
		g.fenceMu.RUnlock()
		restore()
		return false
	}
	sent := r.send(val, 0)
	g.fenceMu.RUnlock()
	if !sent {
		restore()
		return false
	}
	if r.taken(pre, raced) {
		return true
	}
	restore()
	return false
}

// takenHook, if set, runs when an answer was sent and before its fate is
// judged: tests use it to hold the judging, as a receiver preempted
// right after its SEND is.
var takenHook atomic.Pointer[func(*Request)]

// answerHook, if set, runs when an answer is about to be sent, before
// the way it goes is chosen (deliver, commit, commitWrite; under the
// engine's lock for a commit): tests use it to hold answers while a
// freeze is being made, as a busy machine can.
var answerHook atomic.Pointer[func(*Request)]

func (g *Gateway) beforeAnswer(r *Request) {
	if h := answerHook.Load(); h != nil {
		(*h)(r)
	}
}

// signalDeliverable reports whether thread tid has a signal pending that
// it does not block (its own or its process's, /proc/<tid>/status), or is
// traced (a tracer holds a signal it took before signal_deliver reports
// it), or cannot be read: whether a signal may still end its wait.
func signalDeliverable(tid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return true
	}
	var pnd, shd, blk uint64
	seen := 0
	for len(b) > 0 {
		var k, v []byte
		k, v, b = nextStatusField(b)
		v = bytes.TrimSpace(v)
		var dst *uint64
		switch string(k) {
		case "TracerPid":
			if string(v) != "0" {
				return true
			}
			seen++
			continue
		case "SigPnd":
			dst = &pnd
		case "ShdPnd":
			dst = &shd
		case "SigBlk":
			dst = &blk
		default:
			continue
		}
		n, err := strconv.ParseUint(string(v), 16, 64)
		if err != nil {
			return true
		}
		*dst = n
		seen++
	}
	return seen != 4 || (pnd|shd)&^blk != 0
}
