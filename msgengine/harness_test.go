package msgengine

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/kernelipc"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// The differential harness: a scenario is a function of an env; it runs
// once against the kernel (in a fresh IPC namespace, process 0 being the
// test's thread and processes 1.. actors) and once against a fresh engine
// namespace (processes being goroutines with pid handles), and the two
// logs of results must be equal line for line.

// Operations of a call.
const (
	opGet = iota
	opSnd
	opRcv
	opCtl
)

// call is one syscall of a scenario.
type call struct {
	op             int
	key            int32
	flg            int
	id             int
	typ            int64
	text           []byte
	size           int64 // msgsz
	cmd            int
	uid, gid, mode uint32
	qbytes         uint64
}

// backend runs calls for a scenario's processes.
type backend interface {
	do(p int, c call) (string, int64)
	start(p int, c call)
	// settle reports the result of p's call in flight, or done=false if
	// it sleeps.
	settle(p int) (res string, done bool)
	interrupt(p int)
	setCreds(p int, uid, gid uint32) // 0, 0: back to root
	// procFile returns /proc/sysvipc/msg as the scenario's process reads it.
	procFile() string
	close()
}

// env records what a scenario observes.
type env struct {
	b   backend
	log []string
	t   testing.TB
}

func (e *env) logf(format string, a ...any) { e.log = append(e.log, fmt.Sprintf(format, a...)) }

func (e *env) do(p int, c call) int64 {
	s, r := e.b.do(p, c)
	e.log = append(e.log, fmt.Sprintf("p%d %s", p, s))
	return r
}

func (e *env) get(p int, key int32, flg int) int {
	return int(e.do(p, call{op: opGet, key: key, flg: flg}))
}

func (e *env) snd(p, id int, typ int64, text string, flg int) int64 {
	return e.do(p, call{op: opSnd, id: id, typ: typ, text: []byte(text), size: int64(len(text)), flg: flg})
}

func (e *env) rcv(p, id int, size int64, typ int64, flg int) int64 {
	return e.do(p, call{op: opRcv, id: id, size: size, typ: typ, flg: flg})
}

func (e *env) stat(p, id, cmd int) int64 { return e.do(p, call{op: opCtl, id: id, cmd: cmd}) }

func (e *env) set(p, id int, uid, gid, mode uint32, qbytes uint64) int64 {
	return e.do(p, call{op: opCtl, id: id, cmd: ipcns.IPCSet, uid: uid, gid: gid, mode: mode, qbytes: qbytes})
}

func (e *env) rmid(p, id int) int64 { return e.do(p, call{op: opCtl, id: id, cmd: ipcns.IPCRmid}) }

func (e *env) start(p int, c call) {
	e.b.start(p, c)
	e.logf("p%d started", p)
}

func (e *env) startSnd(p, id int, typ int64, text string, flg int) {
	e.start(p, call{op: opSnd, id: id, typ: typ, text: []byte(text), size: int64(len(text)), flg: flg})
}

func (e *env) startRcv(p, id int, size int64, typ int64, flg int) {
	e.start(p, call{op: opRcv, id: id, size: size, typ: typ, flg: flg})
}

// settle logs whether p's call returned (and with what) or sleeps.
func (e *env) settle(p int) {
	s, done := e.b.settle(p)
	if !done {
		s = "asleep"
	}
	e.logf("p%d settle: %s", p, s)
}

func (e *env) interrupt(p int) {
	e.b.interrupt(p)
	e.logf("p%d interrupted", p)
}

func (e *env) creds(p int, uid, gid uint32) { e.b.setCreds(p, uid, gid) }

// ---- formatting shared by both backends ----

func errName(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	return unix.ErrnoName(e)
}

func timeMark(t int64) string {
	if t == 0 {
		return "0"
	}
	return "set"
}

type dsView struct {
	key                        int32
	uid, gid, cuid, cgid, mode uint32
	seq                        uint16
	stime, rtime, ctime        int64
	cbytes, qnum, qbytes       uint64
	lspid, lrpid               string
}

func (d dsView) String() string {
	return fmt.Sprintf("key=%d uid=%d gid=%d cuid=%d cgid=%d mode=%#o seq=%d stime=%s rtime=%s ctime=%s cbytes=%d qnum=%d qbytes=%#x lspid=%s lrpid=%s",
		d.key, d.uid, d.gid, d.cuid, d.cgid, d.mode, d.seq, timeMark(d.stime), timeMark(d.rtime), timeMark(d.ctime),
		d.cbytes, d.qnum, d.qbytes, d.lspid, d.lrpid)
}

func fmtResult(c call, ret int64, errno unix.Errno, mtype int64, text []byte, ds *dsView, mi *Msginfo) string {
	head := fmt.Sprintf("ret=%d err=%s", ret, errName(errno))
	switch c.op {
	case opGet:
		return fmt.Sprintf("msgget(%d,%#o) %s", c.key, c.flg, head)
	case opSnd:
		return fmt.Sprintf("msgsnd(%d,%d,%d,%#o) %s", c.id, c.typ, c.size, c.flg, head)
	case opRcv:
		s := fmt.Sprintf("msgrcv(%d,%d,%d,%#o) %s", c.id, c.size, c.typ, c.flg, head)
		if errno == 0 {
			s += fmt.Sprintf(" mtype=%d text=%q", mtype, text)
		}
		return s
	}
	s := fmt.Sprintf("msgctl(%d,%d) %s", c.id, c.cmd, head)
	if errno == 0 && ds != nil {
		s += " " + ds.String()
	}
	if errno == 0 && mi != nil {
		s += fmt.Sprintf(" %+v", *mi)
	}
	return s
}

// ---- kernel backend ----

type kernelBackend struct {
	// p0uid, p0gid are the ids process 0 (the namespace thread) runs
	// with; 0 for root.
	p0uid, p0gid uint32
	actors       map[int]*kernelipc.Actor
	calls        map[int]call
	names        map[int32]string
	// patience returns how long an actor seen asleep is given to return
	// before settle reports it asleep: lateWake when the engine's log
	// says the call returned, 0 otherwise. A kernel wakeup can reach the
	// sleeper late (kernelipc.Actor.SettleWithin); a call the kernel
	// really leaves asleep is still reported asleep.
	patience func() time.Duration
}

// lateWake bounds how late a kernel wakeup may reach a sleeper that the
// engine's run says was woken.
const lateWake = 2 * time.Second

func newKernelBackend() *kernelBackend {
	return &kernelBackend{actors: map[int]*kernelipc.Actor{}, calls: map[int]call{},
		names:    map[int32]string{int32(os.Getpid()): "p0"},
		patience: func() time.Duration { return 0 }}
}

func (k *kernelBackend) actor(p int) *kernelipc.Actor {
	a := k.actors[p]
	if a == nil {
		// An actor inherits the ids of the thread that forks it.
		uid, gid := k.p0uid, k.p0gid
		if uid != 0 {
			k.setCreds(0, 0, 0)
		}
		var err error
		a, err = kernelipc.StartActor()
		if uid != 0 {
			k.setCreds(0, uid, gid)
		}
		if err != nil {
			panic(err)
		}
		k.actors[p] = a
		k.names[int32(a.Pid)] = fmt.Sprintf("p%d", p)
		// The thread that makes the calls may or may not be the
		// process's main thread: both names read the same, and the
		// thread-versus-process rule (pipelined_send records the
		// receiving thread) is checked by TestPipelinedRecordsThread.
		k.names[int32(a.Tid)] = fmt.Sprintf("p%d", p)
	}
	return a
}

func (k *kernelBackend) pidName(pid int32) string {
	if pid == 0 {
		return "0"
	}
	if n, ok := k.names[pid]; ok {
		return n
	}
	return fmt.Sprintf("pid?%d", pid)
}

func (k *kernelBackend) raw(c call) kernelipc.Call {
	switch c.op {
	case opGet:
		return kernelipc.Call{Nr: unix.SYS_MSGGET, Args: [6]uint64{uint64(uint32(c.key)), uint64(c.flg)}}
	case opSnd:
		buf := make([]byte, 8+max(int64(len(c.text)), 0))
		if c.size <= 1<<20 && int64(len(c.text)) < c.size {
			buf = make([]byte, 8+c.size)
		}
		binary.LittleEndian.PutUint64(buf, uint64(c.typ))
		copy(buf[8:], c.text)
		return kernelipc.Call{Nr: unix.SYS_MSGSND, Args: [6]uint64{uint64(c.id), kernelipc.BufArg(0), uint64(c.size), uint64(c.flg)}, Bufs: [][]byte{buf}}
	case opRcv:
		buf := make([]byte, 8+min(max(c.size, 0), 1<<16))
		return kernelipc.Call{Nr: unix.SYS_MSGRCV, Args: [6]uint64{uint64(c.id), kernelipc.BufArg(0), uint64(c.size), uint64(c.typ), uint64(c.flg)}, Bufs: [][]byte{buf}}
	}
	buf := make([]byte, 120)
	if c.cmd == ipcns.IPCSet {
		binary.LittleEndian.PutUint32(buf[4:], c.uid)
		binary.LittleEndian.PutUint32(buf[8:], c.gid)
		binary.LittleEndian.PutUint32(buf[20:], c.mode)
		binary.LittleEndian.PutUint64(buf[88:], c.qbytes)
	}
	return kernelipc.Call{Nr: unix.SYS_MSGCTL, Args: [6]uint64{uint64(c.id), uint64(c.cmd), kernelipc.BufArg(0)}, Bufs: [][]byte{buf}}
}

// local makes a raw call on the calling (namespace) thread, as an actor
// would.
func local(kc kernelipc.Call) kernelipc.Result {
	var a [6]uintptr
	for i, v := range kc.Args {
		if v >= kernelipc.BufArg(0) && v < kernelipc.BufArg(len(kc.Bufs)) {
			a[i] = uintptr(unsafe.Pointer(&kc.Bufs[v-kernelipc.BufArg(0)][0]))
			continue
		}
		a[i] = uintptr(v)
	}
	r, _, e := unix.Syscall6(kc.Nr, a[0], a[1], a[2], a[3], a[4], a[5])
	return kernelipc.Result{Ret: int64(r), Errno: e, Bufs: kc.Bufs}
}

func (k *kernelBackend) format(c call, r kernelipc.Result) (string, int64) {
	ret := r.Ret
	if r.Errno != 0 {
		ret = -1
	}
	var mtype int64
	var text []byte
	var ds *dsView
	var mi *Msginfo
	if r.Errno == 0 {
		le := binary.LittleEndian
		switch {
		case c.op == opRcv:
			b := r.Bufs[0]
			mtype = int64(le.Uint64(b))
			text = b[8 : 8+ret]
		case c.op == opCtl && (c.cmd == ipcns.IPCStat || c.cmd == MsgStat || c.cmd == MsgStatAny):
			b := r.Bufs[0]
			ds = &dsView{
				key: int32(le.Uint32(b[0:])), uid: le.Uint32(b[4:]), gid: le.Uint32(b[8:]),
				cuid: le.Uint32(b[12:]), cgid: le.Uint32(b[16:]), mode: le.Uint32(b[20:]), seq: le.Uint16(b[24:]),
				stime: int64(le.Uint64(b[48:])), rtime: int64(le.Uint64(b[56:])), ctime: int64(le.Uint64(b[64:])),
				cbytes: le.Uint64(b[72:]), qnum: le.Uint64(b[80:]), qbytes: le.Uint64(b[88:]),
				lspid: k.pidName(int32(le.Uint32(b[96:]))), lrpid: k.pidName(int32(le.Uint32(b[100:]))),
			}
		case c.op == opCtl && (c.cmd == ipcns.IPCInfo || c.cmd == MsgInfo):
			b := r.Bufs[0]
			i := func(o int) int32 { return int32(le.Uint32(b[o:])) }
			mi = &Msginfo{Msgpool: i(0), Msgmap: i(4), Msgmax: i(8), Msgmnb: i(12), Msgmni: i(16),
				Msgssz: i(20), Msgtql: i(24), Msgseg: le.Uint16(b[28:])}
		}
	}
	return fmtResult(c, ret, r.Errno, mtype, text, ds, mi), ret
}

func (k *kernelBackend) do(p int, c call) (string, int64) {
	if p == 0 {
		return k.format(c, local(k.raw(c)))
	}
	r, err := k.actor(p).Do(k.raw(c))
	if err != nil {
		panic(err)
	}
	return k.format(c, r)
}

func (k *kernelBackend) start(p int, c call) {
	if p == 0 {
		panic("process 0 cannot block")
	}
	k.calls[p] = c
	if err := k.actor(p).Start(k.raw(c)); err != nil {
		panic(err)
	}
}

func (k *kernelBackend) settle(p int) (string, bool) {
	a := k.actors[p]
	// Off the namespace thread, whose ids the scenario may have dropped:
	// /proc/<pid>/task/<tid>/syscall of a root actor needs root.
	type settled struct {
		done bool
		r    kernelipc.Result
		err  error
	}
	ch := make(chan settled, 1)
	go func() {
		done, r, err := a.SettleWithin(k.patience())
		ch <- settled{done, r, err}
	}()
	st := <-ch
	done, r, err := st.done, st.r, st.err
	if err != nil {
		sc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", a.Pid, a.Tid))
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", a.Pid, a.Tid))
		panic(fmt.Sprintf("%v (syscall %q, stat %q)", err, sc, st))
	}
	if !done {
		return "", false
	}
	s, _ := k.format(k.calls[p], r)
	return s, true
}

func (k *kernelBackend) interrupt(p int) {
	// The Go runtime in the actor handles SIGURG and ignores it: a
	// signal with a handler, which interrupts msgsnd/msgrcv with EINTR.
	// It goes to the calling thread: kill() could pick another one.
	a := k.actors[p]
	ch := make(chan error, 1)
	go func() { ch <- unix.Tgkill(a.Pid, a.Tid, syscall.SIGURG) }() // as root
	if err := <-ch; err != nil {
		panic(err)
	}
}

func (k *kernelBackend) setCreds(p int, uid, gid uint32) {
	// Only the effective ids of the one thread that makes the calls, by
	// raw syscalls (the Go wrappers would change every thread).
	k.credCall(p, unix.SYS_SETRESUID, 0)
	k.credCall(p, unix.SYS_SETRESGID, 0)
	if p == 0 {
		k.p0uid, k.p0gid = uid, gid
	}
	if uid == 0 {
		return
	}
	k.credCall(p, unix.SYS_SETRESGID, gid)
	k.credCall(p, unix.SYS_SETRESUID, uid)
}

func (k *kernelBackend) credCall(p int, nr uintptr, id uint32) {
	keep := uint64(^uint32(0))
	kc := kernelipc.Call{Nr: nr, Args: [6]uint64{keep, uint64(id), keep}}
	var r kernelipc.Result
	if p == 0 {
		r = local(kc)
	} else {
		var err error
		if r, err = k.actor(p).Do(kc); err != nil {
			panic(err)
		}
	}
	if r.Errno != 0 {
		panic(fmt.Sprintf("set ids: %v", r.Errno))
	}
	if p != 0 {
		// A change of euid makes the process non-dumpable, which hides
		// /proc/<pid>/task/<tid>/syscall from Settle: undo that.
		if _, err := k.actor(p).Do(kernelipc.Call{Nr: unix.SYS_PRCTL, Args: [6]uint64{unix.PR_SET_DUMPABLE, 1}}); err != nil {
			panic(err)
		}
	}
}

func (k *kernelBackend) procFile() string {
	b, err := os.ReadFile("/proc/sysvipc/msg")
	if err != nil {
		panic(err)
	}
	return normalizeProc(string(b), k.pidName)
}

func (k *kernelBackend) close() {
	k.setCreds(0, 0, 0)
	for _, a := range k.actors {
		a.Kill()
	}
}

// ---- engine backend ----

type engineProc struct {
	caller  *ipcns.Caller
	thread  *ipcns.Pid // the calling thread, distinct from the process
	cancel  context.CancelFunc
	call    call
	result  chan string
	pending *string // a result collected by interrupt
}

type engineBackend struct {
	e      *Engine
	texts  *textTracker
	pidns  *ipcns.PidNamespace
	procs  map[int]*engineProc
	caps   ipcns.CapSet
	groups []uint32
}

func newEngineBackend(lim ipcns.Limits) *engineBackend {
	e := New(ipcns.NewResources("diff", lim))
	return &engineBackend{
		e: e, texts: trackTexts(e),
		pidns: ipcns.NewPidNamespace(nil, 1),
		procs: map[int]*engineProc{}, caps: processCaps(), groups: processGroups(),
	}
}

func (b *engineBackend) proc(p int) *engineProc {
	pr := b.procs[p]
	if pr == nil {
		c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(b.pidns, int32(1000+p))}
		c.Creds.Caps = b.caps
		c.Creds.Groups = b.groups
		pr = &engineProc{caller: c, thread: ipcns.NewPid(b.pidns, int32(5000+p))}
		b.procs[p] = pr
	}
	return pr
}

func (b *engineBackend) pidName(pid int32) string {
	if pid == 0 {
		return "0"
	}
	if pid >= 5000 {
		return fmt.Sprintf("p%d", pid-5000)
	}
	return fmt.Sprintf("p%d", pid-1000)
}

// exec runs c for caller and formats the result as the kernel backend does.
func (b *engineBackend) exec(ctx context.Context, pr *engineProc, c call) (string, int64) {
	caller := pr.caller
	e := b.e
	var ret int64
	var err error
	var mtype int64
	var text []byte
	var ds *dsView
	var mi *Msginfo
	switch c.op {
	case opGet:
		var id int32
		id, err = e.Msgget(caller, c.key, c.flg)
		ret = int64(id)
	case opSnd:
		if err = e.CheckSend(int32(c.id), c.typ, c.size); err == nil {
			data := make([]byte, c.size)
			copy(data, c.text)
			err = e.Msgsnd(ctx, caller, &SndOp{MsqID: int32(c.id), Type: c.typ, Data: data, Flags: c.flg})
		}
	case opRcv:
		var m Message
		m, err = e.Msgrcv(ctx, caller, &RcvOp{MsqID: int32(c.id), Size: c.size, Type: c.typ, Flags: c.flg, Thread: pr.thread})
		ret, mtype, text = int64(len(m.Data)), m.Type, m.Data
	case opCtl:
		switch c.cmd {
		case ipcns.IPCStat, MsgStat, MsgStatAny:
			var d MsqidDS
			var r int
			d, r, err = e.Stat(caller, int32(c.id), c.cmd)
			ret = int64(r)
			ds = &dsView{key: d.Perm.Key, uid: d.Perm.UID, gid: d.Perm.GID, cuid: d.Perm.CUID, cgid: d.Perm.CGID,
				mode: uint32(d.Perm.Mode), seq: d.Perm.Seq, stime: d.Stime, rtime: d.Rtime, ctime: d.Ctime,
				cbytes: d.Cbytes, qnum: d.Qnum, qbytes: d.Qbytes, lspid: b.pidName(d.Lspid), lrpid: b.pidName(d.Lrpid)}
		case ipcns.IPCInfo, MsgInfo:
			var m Msginfo
			var r int
			m, r, err = e.Info(int32(c.id), c.cmd)
			ret, mi = int64(r), &m
		case ipcns.IPCSet:
			err = e.Set(caller, int32(c.id), c.uid, c.gid, c.mode, c.qbytes)
		case ipcns.IPCRmid:
			err = e.Remove(caller, int32(c.id))
		default:
			err = unix.EINVAL
			if c.id >= 0 && c.cmd < 0 {
				err = unix.EINVAL
			}
		}
	}
	var errno unix.Errno
	if err != nil {
		var ok bool
		if errno, ok = err.(unix.Errno); !ok {
			panic(err)
		}
		ret = -1
	}
	return fmtResult(c, ret, errno, mtype, text, ds, mi), ret
}

func (b *engineBackend) do(p int, c call) (string, int64) {
	return b.exec(context.Background(), b.proc(p), c)
}

func (b *engineBackend) start(p int, c call) {
	pr := b.proc(p)
	ctx, cancel := context.WithCancel(context.Background())
	pr.cancel, pr.call, pr.result = cancel, c, make(chan string, 1)
	go func() {
		s, _ := b.exec(ctx, pr, c)
		pr.result <- s
	}()
}

func (b *engineBackend) settle(p int) (string, bool) {
	pr := b.procs[p]
	if pr.pending != nil {
		s := *pr.pending
		pr.pending = nil
		return s, true
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case s := <-pr.result:
			pr.cancel()
			return s, true
		default:
		}
		if b.e.sleeping(pr.caller) {
			return "", false
		}
		time.Sleep(50 * time.Microsecond)
	}
	panic(fmt.Sprintf("engine process %d neither returned nor slept", p))
}

// interrupt cancels p's call and waits for it to return, as a signalled
// task returns at once.
func (b *engineBackend) interrupt(p int) {
	pr := b.procs[p]
	pr.cancel()
	select {
	case s := <-pr.result:
		pr.pending = &s
	case <-time.After(10 * time.Second):
		panic(fmt.Sprintf("engine process %d ignored its interruption", p))
	}
}

func (b *engineBackend) setCreds(p int, uid, gid uint32) {
	c := b.proc(p).caller
	if uid == 0 {
		c.Creds = ipcns.Creds{Caps: b.caps, Groups: b.groups}
		return
	}
	c.Creds = ipcns.Creds{EUID: uid, EGID: gid, FSGID: gid, Groups: b.groups}
}

func (b *engineBackend) procFile() string {
	return normalizeProc(string(b.e.ProcSysvipc(b.pidns)), b.pidName)
}

func (b *engineBackend) close() {}

// sleeping reports whether c sleeps in msgsnd or msgrcv on some queue.
func (e *Engine) sleeping(c *ipcns.Caller) bool {
	for _, q := range e.ids.All() {
		q.mu.Lock()
		found := false
		for _, l := range []*waitList{&q.senders, &q.receivers} {
			for w := l.Front(); w != nil; w = w.Next() {
				if w.caller == c {
					found = true
				}
			}
		}
		q.mu.Unlock()
		if found {
			return true
		}
	}
	return false
}

// ---- running a scenario ----

// runKernel runs scenario against the kernel and returns its log. want is
// the engine's log of the same scenario: it tells which calls are expected
// to have returned when the scenario settles them (kernelBackend.patience).
func runKernel(t testing.TB, scenario func(*env), want []string) []string {
	needKernel(t)
	var log []string
	var perr any
	err := kernelipc.InFreshNamespace(func() {
		k := newKernelBackend()
		defer k.close()
		e := &env{b: k, t: t}
		k.patience = func() time.Duration {
			i := len(e.log)
			if i < len(want) && !strings.HasSuffix(want[i], "settle: asleep") && slices.Equal(e.log, want[:i]) {
				return lateWake
			}
			return 0
		}
		defer func() {
			if r := recover(); r != nil {
				perr = r
			}
			log = e.log
		}()
		scenario(e)
	})
	if err != nil {
		t.Fatal(err)
	}
	if perr != nil {
		t.Fatalf("kernel run: %v\nlog so far:\n%s", perr, strings.Join(log[max(len(log)-15, 0):], "\n"))
	}
	return log
}

// runEngine runs scenario against a fresh engine namespace.
func runEngine(t testing.TB, lim ipcns.Limits, scenario func(*env)) []string {
	b := newEngineBackend(lim)
	e := &env{b: b, t: t}
	scenario(e)
	b.texts.checkTexts(t, b.e)
	return e.log
}

// diff runs scenario on both sides and fails on the first difference.
func diff(t testing.TB, scenario func(*env)) {
	t.Helper()
	g := runEngine(t, ipcns.DefaultLimits(), scenario)
	k := runKernel(t, scenario, g)
	compareLogs(t, k, g)
}

func compareLogs(t testing.TB, k, g []string) {
	t.Helper()
	for i := 0; i < max(len(k), len(g)); i++ {
		var kl, gl string
		if i < len(k) {
			kl = k[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if kl != gl {
			t.Fatalf("step %d differs:\nkernel: %s\nengine: %s\n\nkernel log:\n%s", i, kl, gl, strings.Join(k[:min(i+1, len(k))], "\n"))
		}
	}
}
