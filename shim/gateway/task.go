package gateway

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
	"golang.org/x/sys/unix"
)

// ErrTaskGone means the calling thread has exited (or its tid no longer
// names it): there is nobody to answer.
var ErrTaskGone = errors.New("gateway: task gone")

// Task is a calling thread as the gateway knows it: who it is (its thread
// group's pid handle, its credentials, its kernel IPC namespace) and the
// state of its trapped calls. A thread makes one system call at a time,
// so it has at most one call in the gateway.
//
// A Task is valid from the moment build saw its notification still
// pending after reading /proc/<tid>, until the kernel reports the
// thread's exit or exec (tasktrace): the exit is reported at the start of
// do_exit, before the tid can be freed and reused, and the gateway
// applies it before serving any later call. So no per-call check binds a
// cached Task to its tid.
type Task struct {
	// Tid and Tgid are the thread and thread group ids in the shim's pid
	// namespace (the initial one).
	Tid, Tgid int
	// Caller is what the engines need: credentials mapped through the
	// task's user namespace, and the process's pid handle.
	Caller ipcns.Caller
	// IPCNS is the inode of the task's kernel IPC namespace
	// (/proc/<tid>/ns/ipc): it picks the engine namespace.
	IPCNS uint64
	// Thread is the thread's own pid handle when it does not lead its
	// thread group (nil for the leader): msgrcv records it as msg_lrpid
	// when a message is handed to it asleep, as Linux's task_pid.
	Thread *ipcns.Pid

	proc *process
	// pidfd (PIDFD_THREAD), kept only for listeners whose profile lets
	// credentials change unseen (ListenerOptions.IDsFixed false): each
	// call then compares the pidfd's credentials with key. -1 otherwise.
	pidfd int
	key   credKey

	// dead is set when the thread's exit or exec was applied, or the
	// Task was replaced: it no longer names the thread.
	dead atomic.Bool
	// rebuild marks an identity to be read again at the thread's next
	// call (Forget).
	rebuild atomic.Bool

	// mu guards the call state below and pidfd's lifetime.
	mu sync.Mutex
	// call is the thread's call in the gateway: being served, or asleep
	// in an engine. A new notification from the thread means it is gone.
	call *Request
	// intr is what the kernel reported about the thread's last
	// interrupted call, until the thread's next notification, which may
	// be its restart.
	intr *interruption
	// resend is the answer of the thread's last call, which did not take
	// it, until the report of that call's interruption is applied
	// (Request.keepForRestart). Guarded like intr.
	resend *pendingAnswer
	// outer is an interruption whose restart is still to come while the
	// handler that ran makes calls of its own (Task.pendingRestartLocked).
	// Guarded like intr.
	outer *interruption
	// sigSeq and sigRegs: the event sequence number of the first signal
	// the thread took after event sigFrom (the last answer whose fate
	// await may have to learn was sent after it), and its registers then.
	// The first: a discarded answer is reported by the first signal the
	// thread takes after the SEND (it was in the kernel until then), and
	// a busy signaller's later ones show the handler's registers.
	sigFrom, sigSeq uint64
	sigRegs         tasktrace.Regs
	// lastLs and lastID name the thread's newest notification the
	// gateway took up (bound, or found its own interruption): a listener's
	// receivers can dispatch an older notification of the thread after a
	// newer one, and it is then gone (stale).
	lastLs *listener
	lastID uint64
}

// callOverLocked ends the thread's call in the gateway, if any, because
// the thread called again: a thread makes one call at a time, so it is
// over. Unanswered, it vanished with no signal taken by this thread (a
// stop begun by another thread, a freeze, a wakeup for a signal another
// thread took) and the kernel restarts it: it is marked gone and recorded
// as interrupted with no handler, unless a report says more. The caller
// cancels the returned sleep, if any, once it holds no gateway lock.
// t.mu is held.
func (t *Task) callOverLocked() canceler {
	c := t.call
	if c == nil {
		return nil
	}
	t.call = nil
	if c.answered.Load() || c.gone.Swap(true) {
		return nil
	}
	if t.intr == nil {
		t.intr = &interruption{call: c, origin: c, slept: c.wait != nil}
	}
	return c.wait
}

// stale reports whether notification id of listener ls is older than one
// the gateway already took up for the thread: the thread makes one call
// at a time and a filter numbers its notifications in order, so the
// older one is gone (its thread was interrupted and has called again).
// t.mu is held.
func (t *Task) staleLocked(ls *listener, id uint64) bool {
	// Ids count up from a random start and may wrap.
	return t.lastLs == ls && int64(id-t.lastID) < 0
}

// credKey is a thread's ids as PIDFD_GET_INFO reports them.
type credKey struct{ ruid, euid, suid, fsuid, rgid, egid, sgid, fsgid uint32 }

// process is a thread group seen by the gateway: its pid handle (the key
// of its SEM_UNDO lists) and what the kernel reported of its signals.
type process struct {
	tgid int
	// pid is nil until a thread of the process was identified (events
	// can name a process before its first call).
	pid *ipcns.Pid
	// sigGen and sigDel are the event sequence numbers (Gateway.seq) of
	// the last signal queued for the process or one of its threads, and
	// of the last one a thread took: sigGen > sigDel means one may be
	// pending. Written under evMu, read atomically.
	sigGen, sigDel atomic.Uint64
	// queued holds the last signals queued for the process, for
	// signalQueuedBefore: queued[(n-1) % len] is the newest of the
	// nQueued recorded. Under evMu.
	queued  [4]queuedSignal
	nQueued uint64
	// sigAt is when the last signal was queued for the process
	// (tasktrace.Now's clock; 0: never), for signalledLately.
	sigAt atomic.Int64
	// threads counts the process's live Tasks (under tmu).
	threads int
}

// mayBeSignalled reports whether a signal queued for p before event
// sequence number since, or after it, may not have been taken yet: an
// answer to one of p's threads could then race with a signal. A drain
// that found signal events dropped (sigLostSeq) counts as a signal
// queued for every process: the dropped one may have been p's.
func (g *Gateway) mayBeSignalled(p *process, since uint64) bool {
	gen := g.lastSignal(p)
	return gen > since || gen > p.sigDel.Load()
}

// queuedSignal records a signal queued for a process: the event sequence
// number of its report, and when it was queued (tasktrace's
// Event.Queued, CLOCK_MONOTONIC ns), or 0 when not known (a dropped
// report: lostLocked).
type queuedSignal struct {
	seq uint64
	at  int64
}

// queueSlack is how late a signal's time (Event.Queued, read in the
// sender after it woke the target, under the sender's siglock) may be
// after the wait it ended was woken: a few instructions, with room
// for the difference between bpf_ktime_get_ns and the vDSO's clock.
const queueSlack = 20 * time.Microsecond

// recordSignalLocked records a signal queued for p, whose report has
// event sequence number seq, at time at (0: unknown). evMu is held.
func (p *process) recordSignalLocked(seq uint64, at int64) {
	p.sigGen.Store(seq)
	p.queued[p.nQueued%uint64(len(p.queued))] = queuedSignal{seq, at}
	p.nQueued++
	if at == 0 {
		at = tasktrace.Now()
	}
	p.sigAt.Store(at)
}

// signalMemory is how long after a signal was queued for a process its
// msgrcv answers still go by vehicle (vehicle.go) though no signal is
// known to race with them: a signal that comes during an answer, after
// the check, leaves its fate to await, which can mistake an identical
// next call's interruption for the answer's discard ("Open"). Signals
// come in runs (timers, SIGCHLDs, a storm): a process signalled once is
// likely to be again. Nanoseconds; tests set it (SetSignalMemory).
var signalMemory atomic.Int64

func init() { signalMemory.Store(int64(time.Second)) }

// signalledLately reports whether a signal was queued for p within
// signalMemory.
func (p *process) signalledLately() bool {
	at := p.sigAt.Load()
	return at != 0 && tasktrace.Now()-at < signalMemory.Load()
}

// signalQueuedBefore reports whether a signal queued for p after event
// sequence number pre may have ended a wait of one of p's threads before
// at (CLOCK_MONOTONIC ns): whether an answer whose SEND returned at at,
// claimed when pre events were applied, may have been discarded. A
// signal queued after the SEND returned cannot have been: the kernel
// discards an answer only if the signal woke the thread before the SEND
// completed its wait (do_wait_for_common checks for a signal only while
// the completion is not done). The caller has applied the events
// recorded since the SEND returned.
func (g *Gateway) signalQueuedBefore(p *process, pre uint64, at int64) bool {
	if g.lastSignal(p) <= pre {
		return false
	}
	if g.sigLostSeq.Load() > pre {
		// Dropped signal events of unknown processes: no time.
		return true
	}
	g.evMu.Lock()
	defer g.evMu.Unlock()
	size := uint64(len(p.queued))
	for i := range min(p.nQueued, size) {
		q := p.queued[(p.nQueued-1-i)%size]
		if q.seq <= pre {
			return false // this one and every older one came before pre
		}
		if q.at == 0 || q.at <= at+int64(queueSlack) {
			return true
		}
	}
	// Every signal recorded came after; one older than those, no longer
	// recorded, may still be after pre.
	return p.nQueued > size
}

// lastSignal returns the event sequence number of the last signal that
// may have been queued for p: its own last signal_generate, or the last
// drain that found signal events dropped.
func (g *Gateway) lastSignal(p *process) uint64 {
	return max(p.sigGen.Load(), g.sigLostSeq.Load())
}

// liveCaps returns the thread's effective capabilities now (capget(2)),
// or none if it has exited: the engines ask only where a capability
// decides a check.
func (t *Task) liveCaps() ipcns.CapSet {
	caps, err := capEff(t.Tid)
	if err != nil || t.dead.Load() {
		return 0
	}
	return ipcns.CapSet(caps)
}

// lookup returns the Task of thread tid if the gateway knows it.
func (g *Gateway) lookup(tid int) *Task {
	g.tmu.Lock()
	t := g.tasks[tid]
	g.tmu.Unlock()
	return t
}

// resolve returns the Task of the thread that raised notification id on
// listener ls, building it on first sight or when its identity may have
// changed. The caller has applied every event recorded before the
// notification was received.
func (g *Gateway) resolve(ls *listener, tid int, id uint64) (*Task, error) {
	t := g.lookup(tid)
	if t != nil && t.current(ls) {
		return t, nil
	}
	// One build per thread at a time: receivers of a listener may hold
	// two notifications of one thread (the older one gone).
	mu := &g.buildMu[tid%len(g.buildMu)]
	mu.Lock()
	defer mu.Unlock()
	if t = g.lookup(tid); t != nil && t.current(ls) {
		return t, nil // built meanwhile
	}
	if t != nil {
		// Its call, if any, is over once the thread calls again (or
		// this notification is stale): wait for an answer in flight to
		// be recorded before insert judges it.
		t.mu.Lock()
		prev := t.call
		t.mu.Unlock()
		if prev != nil {
			prev.settle()
		}
	}
	nt, err := g.build(ls, tid)
	if err != nil {
		return nil, err
	}
	if h := publishHook.Load(); h != nil {
		(*h)(tid)
	}
	if err := g.insert(nt, ls, id); err != nil {
		nt.release()
		return nil, err
	}
	return nt, nil
}

// current reports whether the Task's identity can serve a call from ls
// as it is: not marked for rebuilding, and (where the profile lets them
// change unseen) the same IPC namespace and ids.
func (t *Task) current(ls *listener) bool {
	return !t.rebuild.Load() && (ls.opts.NSFixed || t.sameIPCNS()) && (ls.opts.IDsFixed || t.sameCreds())
}

// sameIPCNS reports whether the thread is still in the IPC namespace it
// had when identified (a readlink; only where it could change unseen).
func (t *Task) sameIPCNS() bool {
	ino, err := nsInode("/proc/" + strconv.Itoa(t.Tid) + "/ns/ipc")
	return err == nil && ino == t.IPCNS
}

// sameCreds reports whether the thread still has the ids it had when
// identified (one PIDFD_GET_INFO; only where they could change unseen).
func (t *Task) sameCreds() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pidfd < 0 {
		return false
	}
	k, err := pidfdCreds(t.pidfd)
	return err == nil && k == t.key
}

// release closes the Task's pidfd, if any.
func (t *Task) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pidfd >= 0 {
		unix.Close(t.pidfd)
		t.pidfd = -1
	}
}

// build learns everything about thread tid.
func (g *Gateway) build(ls *listener, tid int) (*Task, error) {
	t := &Task{Tid: tid, pidfd: -1}
	if !ls.opts.IDsFixed {
		fd, err := unix.PidfdOpen(tid, unix.PIDFD_THREAD)
		if err != nil {
			return nil, ErrTaskGone
		}
		t.pidfd = fd
		if t.key, err = pidfdCreds(fd); err != nil {
			t.release()
			return nil, ErrTaskGone
		}
	}
	fail := func(err error) (*Task, error) {
		t.release()
		return nil, err
	}
	dir := "/proc/" + strconv.Itoa(tid)
	st, err := readStatus(dir)
	if err != nil {
		return fail(err)
	}
	t.Tgid = st.tgid
	if t.IPCNS, err = nsInode(dir + "/ns/ipc"); err != nil {
		return fail(ErrTaskGone)
	}
	uidMap, err := readIDMap(dir + "/uid_map")
	if err != nil {
		return fail(ErrTaskGone)
	}
	gidMap, err := readIDMap(dir + "/gid_map")
	if err != nil {
		return fail(ErrTaskGone)
	}
	c := &t.Caller.Creds
	c.EUID = uidMap.toInner(st.euid)
	c.EGID = gidMap.toInner(st.egid)
	c.FSGID = gidMap.toInner(st.fsgid)
	for _, gid := range st.groups {
		c.Groups = append(c.Groups, gidMap.toInner(gid))
	}
	c.Caps = ipcns.CapSet(st.capEff)
	c.LiveCaps = t.liveCaps
	pidNS, err := g.pidNamespace(dir, len(st.nstgid))
	if err != nil {
		return fail(err)
	}
	// The process's handle, unless the process has one already: insert
	// gives it the record of the process.
	t.Caller.Pid = ipcns.NewPid(pidNS, st.nstgid...)
	if tid != t.Tgid && len(st.nspid) == len(st.nstgid) {
		t.Thread = ipcns.NewPid(pidNS, st.nspid...)
	}
	if err := g.watch(t.IPCNS); err != nil {
		return fail(err)
	}
	return t, nil
}

// insert publishes nt, built for notification id of listener ls,
// replacing the thread's previous Task, if any. What the gateway knows of
// the thread's calls moves to nt — the interruption the kernel reported,
// the last signal's registers, the newest call taken up — so that a
// thread whose identity is read again (setuid, unshare) loses nothing:
// its previous call, still unanswered, is over (the thread called again)
// and is treated as restart would treat it. A notification older than one
// already taken up for the thread is gone: ErrTaskGone.
func (g *Gateway) insert(nt *Task, ls *listener, id uint64) error {
	cancel, err := g.insertLocked(nt, ls, id)
	if cancel != nil {
		// Not under tmu: a cancel takes an engine lock (doc.go, "Locks").
		g.Stats.Interrupted.Add(1)
		cancel.Cancel()
	}
	return err
}

func (g *Gateway) insertLocked(nt *Task, ls *listener, id uint64) (canceler, error) {
	g.evMu.Lock()
	defer g.evMu.Unlock()
	// Everything nt holds was read through /proc/<tid>: it described the
	// notifying task if that task still waits now. Checked under evMu:
	// a waiting task has not begun to exit (a task leaves seccomp's wait,
	// removing its notification, before do_exit), so its exit is reported
	// after this point and applied after nt is published, and finds it.
	// Checked before taking evMu, a thread that left in between (a
	// handler that ends the thread) had its exit applied to no Task and
	// nt stayed published: a dead thread's pidfd held until its process
	// exits, and its identity given to the next thread with its tid.
	if err := ls.l.IDValid(id); err != nil {
		return nil, ErrTaskGone
	}
	g.tmu.Lock()
	defer g.tmu.Unlock()
	// The process's record, made here and not while nt was built: the
	// process is alive now, so its exit, applied later, will drop the
	// record. Made before the check above, a record of a process whose
	// exit had been applied meanwhile stayed, and gave its pid handle to
	// the next process with that tgid.
	p := g.procs[nt.Tgid]
	if p == nil {
		p = &process{tgid: nt.Tgid}
		g.procs[nt.Tgid] = p
	}
	if p.pid == nil {
		p.pid = nt.Caller.Pid // events named the process before its first call
	}
	nt.proc, nt.Caller.Pid = p, p.pid
	var cancel canceler
	if old := g.tasks[nt.Tid]; old != nil {
		old.mu.Lock()
		if !old.dead.Load() {
			if old.staleLocked(ls, id) {
				old.mu.Unlock()
				return nil, ErrTaskGone
			}
			cancel = old.callOverLocked()
			nt.intr, nt.outer = old.intr, old.outer
			nt.sigFrom, nt.sigSeq, nt.sigRegs = old.sigFrom, old.sigSeq, old.sigRegs
			nt.lastLs, nt.lastID = old.lastLs, old.lastID
			old.intr, old.outer = nil, nil
			old.dead.Store(true)
		}
		old.mu.Unlock()
		old.proc.threads--
		g.queue(old.release)
	}
	g.tasks[nt.Tid] = nt
	nt.proc.threads++
	return cancel, nil
}

// publishHook, if set, runs after a thread's identity was read and
// before it is published (insert): tests use it to end the thread there.
var publishHook atomic.Pointer[func(tid int)]

// Forget marks the cached identity of thread tid, if any, to be read
// again at its next call (the thread may have changed namespace or
// credentials). The Task stays in the table until then, so that the
// kernel's reports about the thread's calls still reach it.
func (g *Gateway) Forget(tid int) {
	if t := g.lookup(tid); t != nil {
		t.rebuild.Store(true)
	}
}

// watch has the kernel report the events of IPC namespace ino's tasks.
func (g *Gateway) watch(ino uint64) error {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	if g.watched[ino] {
		return nil
	}
	if err := g.tr.Watch(ino); err != nil {
		return fmt.Errorf("watch IPC namespace %d: %w", ino, err)
	}
	g.watched[ino] = true
	return nil
}

// PidNamespace returns the pid namespace of process pid as the engines
// know it (they compare namespaces by identity), registering its chain on
// first sight: for readers outside the trapped path, such as the
// in-container /proc view.
func (g *Gateway) PidNamespace(pid int) (*ipcns.PidNamespace, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	st, err := readStatus(dir)
	if err != nil {
		return nil, err
	}
	return g.pidNamespace(dir, len(st.nstgid))
}

// Unwatch stops the kernel's reports about IPC namespace ino, whose last
// container is gone: the kernel may give its inode number to a new,
// unrelated namespace.
func (g *Gateway) Unwatch(ino uint64) {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	if !g.watched[ino] {
		return
	}
	delete(g.watched, ino)
	g.vnsMu.Lock()
	delete(g.vns, ino)
	g.vnsMu.Unlock()
	// A thread still in ino that calls again (the namespace was refused,
	// and is served later) is identified afresh, which watches it again.
	for _, t := range g.tasks {
		if t.IPCNS == ino {
			t.rebuild.Store(true)
		}
	}
	if !g.ready() {
		return
	}
	if err := g.tr.Unwatch(ino); err != nil {
		g.logf("gateway: unwatch IPC namespace %d: %v", ino, err)
	}
}
