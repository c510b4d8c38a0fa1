package gateway

// This file delivers a msgrcv answer that a signal may race with through
// the kernel itself, so that whether the thread took it is a fact read
// from the kernel, not inferred from the thread's next signal report.
//
// A plain SEND of a byte count can be discarded by the kernel after it
// was accepted (a signal woke the thread first), and ADDFD|SEND, which
// confirms delivery, answers only 0. await reads the fate from the
// thread's first signal report after the SEND, but that report cannot
// tell the answered call from an identical next call (a loop) that the
// thread made after taking the answer and that was interrupted before
// any receiver read it: the message was then requeued and received twice
// (TestAwaitLateJudgeDifferential).
//
// A vehicle is a kernel message queue made, for one answer, in the
// thread's own kernel IPC namespace (which is otherwise empty: every
// SysV IPC call of the container is trapped) with the id of the engine's
// queue (kernel.msg_next_id), holding the one message the engine chose.
// The call is then answered SECCOMP_USER_NOTIF_FLAG_CONTINUE: if the
// thread takes that answer, the kernel runs its msgrcv, with its own
// arguments, on the vehicle, and the message is there and selected (the
// engine chose it by the same rules), so the call returns it at once and
// the vehicle is empty. If the answer is discarded, the thread never
// runs its msgrcv natively (a restart is trapped again) and the message
// stays. So the vehicle's msg_qnum is the answer's fate, once the thread
// can no longer be about to take it: it took a signal since (its report
// is drained), or it is asleep, stopped, frozen, or dead. A thread that
// took the CONTINUE runs msgrcv before any of these: try_to_wake_up has
// made it runnable before the CONTINUE returns (TASK_WAKING reads as
// 'R'), nothing between its wait in the trap and the dequeue sleeps but
// mutex_lock ('D'), and nothing stops or freezes it there.
//
// The answering goroutine does it all itself, on its own thread, which
// joins the thread's namespace for the while (setns) and comes back: a
// handful of system calls, only for msgrcv answers that a signal may race
// with (they were awaited before) or that go to a process signalled
// lately (signalMemory). The engine's lock is held until the
// fate is known, as with await.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/abi"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
)

// errNoVehicle: no vehicle can carry this answer; it goes the usual way.
var errNoVehicle = errors.New("no vehicle")

// noVehicles turns vehicles off (tests: SetVehicles).
var noVehicles atomic.Bool

// vehicleLimit bounds how long an answer waits, holding the engine's
// lock, for its thread to run (as awaitLimit bounds await). Past it the
// answer is taken as delivered and the vehicle is left to a goroutine
// that learns its fate (settleLate).
const vehicleLimit = 50 * time.Millisecond

// maxLate bounds a namespace's vehicles left to settleLate: past it,
// answers are awaited.
const maxLate = 8

// vehiclesUsable reports whether this host can carry answers by
// vehicle: SELinux and Smack check a msgrcv against the labels of the
// queue and message, which are the shim's, not the container's.
var vehiclesUsable = sync.OnceValue(func() bool {
	for _, p := range []string{"/sys/fs/selinux/enforce", "/sys/fs/smackfs"} {
		if _, err := os.Stat(p); err == nil {
			return false
		}
	}
	if b, err := os.ReadFile("/sys/kernel/security/lsm"); err == nil &&
		(bytes.Contains(b, []byte("selinux")) || bytes.Contains(b, []byte("smack"))) {
		return false
	}
	return true
})

// ownIPCNS is the shim's own IPC namespace (inode, and an fd to come
// back to), opened once.
var ownIPCNS = sync.OnceValues(func() (uint64, int) {
	fd, err := unix.Open("/proc/self/ns/ipc", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, -1
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		unix.Close(fd)
		return 0, -1
	}
	return st.Ino, fd
})

// vehicleNS is what the gateway keeps about one IPC namespace's vehicles
// (Gateway.vns, dropped by Unwatch).
type vehicleNS struct {
	// mu serializes making vehicles in the namespace: msg_next_id is
	// taken by the next msgget there. It guards the fields below.
	mu sync.Mutex
	// swept: the namespace's leftover queues were removed (sweep).
	swept bool
	// msgmax and msgmnb are the namespace's limits as last read or set.
	msgmax, msgmnb int
	// late counts the vehicles left to settleLate.
	late int
}

// vehicleNSOf returns the vehicle state of namespace ino.
func (g *Gateway) vehicleNSOf(ino uint64) *vehicleNS {
	g.vnsMu.Lock()
	defer g.vnsMu.Unlock()
	v := g.vns[ino]
	if v == nil {
		v = &vehicleNS{}
		g.vns[ino] = v
	}
	return v
}

// commitByKernel answers r's msgrcv with the message (mtype, text) of
// queue msqid through a vehicle and reports whether the thread took it;
// pre is the count of events applied before the answer (fateWindow). An
// error (errNoVehicle) means nothing was answered. r.answering is held.
func (r *Request) commitByKernel(msqid int32, mtype int64, text []byte, pre uint64) (bool, error) {
	t, g := r.Task, r.g
	own, ownFd := ownIPCNS()
	if noVehicles.Load() || !vehiclesUsable() || ownFd < 0 {
		return false, fmt.Errorf("%w: turned off", errNoVehicle)
	}
	if t.IPCNS == 0 || t.IPCNS == own {
		return false, fmt.Errorf("%w: thread %d is in the shim's IPC namespace", errNoVehicle, t.Tid)
	}
	vns := g.vehicleNSOf(t.IPCNS)
	nsFd, err := openIPCNS(t.Tid, t.IPCNS)
	if err != nil {
		return false, err
	}
	defer unix.Close(nsFd)
	runtime.LockOSThread()
	if err := unix.Setns(nsFd, unix.CLONE_NEWIPC); err != nil {
		runtime.UnlockOSThread()
		return false, fmt.Errorf("%w: setns: %v", errNoVehicle, err)
	}
	defer leaveIPCNS(ownFd)
	if err := vns.make(msqid, mtype, text); err != nil {
		return false, err
	}
	g.fenceMu.RLock()
	if g.fencedLocked(r.ls) {
		r.parkLocked(answer{}, true)
		g.fenceMu.RUnlock()
		rmidVehicle(msqid)
		return false, nil
	}
	err = r.ls.l.Continue(r.Notif.ID)
	g.fenceMu.RUnlock()
	if err != nil {
		if seccompnotify.IsGone(err) {
			r.gone.Store(true)
		} else {
			g.logf("gateway: continue tid %d: %v", t.Tid, err)
		}
		rmidVehicle(msqid)
		return false, nil
	}
	g.observeReply(r, 0, nil)
	r.answered.Store(true)
	g.Stats.ByKernel.Add(1)
	if h := takenHook.Load(); h != nil {
		(*h)(r)
	}
	taken, settled := r.vehicleFate(msqid, pre, time.Now().Add(vehicleLimit))
	if !settled {
		// The thread has not run: taken as delivered; its fate is
		// learnt later, for the log.
		g.Stats.Unsettled.Add(1)
		vns.mu.Lock()
		vns.late++
		vns.mu.Unlock()
		go r.settleLate(vns, msqid, pre)
		return true, nil
	}
	rmidVehicle(msqid)
	if !taken {
		g.Stats.Discarded.Add(1)
		r.gone.Store(true)
	}
	return taken, nil
}

// openIPCNS opens the IPC namespace of thread tid, which must be ino.
func openIPCNS(tid int, ino uint64) (int, error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(tid)+"/ns/ipc", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: %v", errNoVehicle, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Ino != ino {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: thread %d left its IPC namespace", errNoVehicle, tid)
	}
	return fd, nil
}

// leaveIPCNS takes the calling thread back to the shim's IPC namespace
// (ownFd) and unlocks it from its goroutine. A thread that cannot go back
// stays locked: it ends with its goroutine.
func leaveIPCNS(ownFd int) {
	if unix.Setns(ownFd, unix.CLONE_NEWIPC) == nil {
		runtime.UnlockOSThread()
	}
}

// make creates queue msqid (ipc_idr_alloc takes msg_next_id's index and
// sequence) holding the message, raising the namespace's msgmax and
// msgmnb first where the engine's limits are larger (a queue's own
// msg_qbytes could be raised only with CAP_SYS_RESOURCE). The calling
// thread is in the namespace.
func (v *vehicleNS) make(msqid int32, mtype int64, text []byte) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.late >= maxLate {
		return fmt.Errorf("%w: %d answers of this namespace unsettled", errNoVehicle, v.late)
	}
	if !v.swept {
		sweep()
		v.swept = true
	}
	for _, l := range []struct {
		path string
		cur  *int
	}{{"/proc/sys/kernel/msgmax", &v.msgmax}, {"/proc/sys/kernel/msgmnb", &v.msgmnb}} {
		need := max(len(text), 1) // msgsnd needs qnum+1 <= qbytes too
		if *l.cur >= need {
			continue
		}
		n, err := raiseSysctl(l.path, need)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errNoVehicle, l.path, err)
		}
		*l.cur = n
	}
	if err := os.WriteFile("/proc/sys/kernel/msg_next_id", []byte(strconv.Itoa(int(msqid))), 0); err != nil {
		return fmt.Errorf("%w: msg_next_id: %v", errNoVehicle, err)
	}
	id, _, errno := unix.Syscall(unix.SYS_MSGGET, 0 /* IPC_PRIVATE */, 0o666, 0)
	if errno != 0 {
		return fmt.Errorf("%w: msgget: %v", errNoVehicle, errno)
	}
	if int32(id) != msqid {
		// Its index is taken: a vehicle left to settleLate.
		rmidVehicle(int32(id))
		return fmt.Errorf("%w: msgget made id %d, not %d", errNoVehicle, int32(id), msqid)
	}
	buf := make([]byte, mtypeSize+len(text))
	abi.MarshalMtype(buf, mtype)
	copy(buf[mtypeSize:], text)
	if _, _, errno := unix.Syscall6(unix.SYS_MSGSND, uintptr(msqid), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(text)),
		unix.IPC_NOWAIT, 0, 0); errno != 0 {
		rmidVehicle(msqid)
		v.msgmax, v.msgmnb = 0, 0 // read them again next time
		return fmt.Errorf("%w: msgsnd: %v", errNoVehicle, errno)
	}
	return nil
}

// sweep removes the queues of the calling thread's IPC namespace: every
// IPC call of its tasks is trapped, so a queue there is a vehicle a shim
// left (one that crashed), which would hold its index.
func sweep() {
	var info [64]byte
	maxIdx, _, errno := unix.Syscall(unix.SYS_MSGCTL, 0, 12 /* MSG_INFO */, uintptr(unsafe.Pointer(&info[0])))
	if errno != 0 {
		return
	}
	var ds [abi.SizeOfMsqidDS]byte
	for idx := 0; idx <= int(maxIdx); idx++ {
		id, _, errno := unix.Syscall(unix.SYS_MSGCTL, uintptr(idx), 11 /* MSG_STAT */, uintptr(unsafe.Pointer(&ds[0])))
		if errno == 0 {
			rmidVehicle(int32(id))
		}
	}
}

// raiseSysctl makes the integer sysctl at path at least n and returns
// its value.
func raiseSysctl(path string, n int) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	cur, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, err
	}
	if cur >= n {
		return cur, nil
	}
	return n, os.WriteFile(path, []byte(strconv.Itoa(n)), 0)
}

// vehicleFull reports whether vehicle msqid (in the calling thread's
// namespace) still holds its message.
func vehicleFull(msqid int32) (bool, error) {
	var b [abi.SizeOfMsqidDS]byte
	if _, _, errno := unix.Syscall(unix.SYS_MSGCTL, uintptr(msqid), unix.IPC_STAT, uintptr(unsafe.Pointer(&b[0]))); errno != 0 {
		return false, fmt.Errorf("msgctl IPC_STAT: %w", errno)
	}
	var ds abi.MsqidDS
	ds.UnmarshalBytes(b[:])
	return ds.Qnum != 0, nil
}

func rmidVehicle(msqid int32) { unix.Syscall(unix.SYS_MSGCTL, uintptr(msqid), unix.IPC_RMID, 0) }

// vehicleFate waits until the fate of the answer carried by vehicle
// msqid (in the calling thread's namespace) is known, or deadline:
// taken reports whether the thread took it, settled whether that is
// known.
func (r *Request) vehicleFate(msqid int32, pre uint64, deadline time.Time) (taken, settled bool) {
	g, t := r.g, r.Task
	for i := 0; ; i++ {
		full, err := vehicleFull(msqid)
		if err == nil && full {
			g.evMu.Lock()
			g.drainLocked()
			g.evMu.Unlock()
			// Whether the thread can still be about to take the answer
			// is read before the queue is read again: one that took it
			// emptied the queue before it could report, sleep, stop or
			// die.
			t.mu.Lock()
			reported := t.sigSeq > pre
			t.mu.Unlock()
			past := reported || t.dead.Load() || !aboutToRun(t.Tid)
			if full, err = vehicleFull(msqid); err == nil && full && past {
				return false, true
			}
		}
		switch {
		case err != nil:
			g.logf("gateway: msgrcv answer to tid %d: %v; taken as delivered", t.Tid, err)
			return true, true
		case !full:
			return true, true
		case time.Now().After(deadline):
			return false, false
		}
		if i < 50 {
			// The thread woken by the CONTINUE has only to run.
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// settleLate learns the fate of an answer taken as delivered before it
// was known, for the log, and removes its vehicle; on a thread of its
// own that joins the namespace. It polls every 10 ms; it was counted in
// vns.late, which bounds how many run.
func (r *Request) settleLate(vns *vehicleNS, msqid int32, pre uint64) {
	defer func() {
		vns.mu.Lock()
		vns.late--
		vns.mu.Unlock()
	}()
	_, ownFd := ownIPCNS()
	nsFd, err := openIPCNS(r.Task.Tid, r.Task.IPCNS)
	if err != nil {
		return // the thread is gone, and its namespace may be
	}
	defer unix.Close(nsFd)
	runtime.LockOSThread()
	if unix.Setns(nsFd, unix.CLONE_NEWIPC) != nil {
		runtime.UnlockOSThread()
		return
	}
	defer leaveIPCNS(ownFd)
	for {
		taken, settled := r.vehicleFate(msqid, pre, time.Time{})
		if settled {
			rmidVehicle(msqid)
			if !taken {
				r.g.logf("gateway: the msgrcv answer to tid %d taken as delivered was discarded: its message is lost", r.Task.Tid)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// aboutToRun reports whether thread tid may still be about to run its
// msgrcv (/proc/PID/stat): running or runnable ('R'), or in an
// uninterruptible wait other than the freezer's (the trap's wait ends in
// mutex_lock). Not when it sleeps, is stopped (a group stop, a
// tracer's), frozen, dead or gone. A read that fails for another reason
// says nothing: about to run.
func aboutToRun(tid int) bool {
	dir := "/proc/" + strconv.Itoa(tid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	switch b[i+2] {
	case 'R':
		return true
	case 'D':
		w, err := os.ReadFile(dir + "/wchan")
		return err != nil || !bytes.Equal(w, []byte("__refrigerator"))
	}
	return false
}
