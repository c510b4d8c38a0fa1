package semengine

// The differential test harness: a scenario is a function of a world, and
// runs once against the kernel (in a fresh IPC namespace) and once against
// a fresh engine namespace; the two logs of results must be equal.

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/kernelipc"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	kernelipc.ServeActorIfChild()
	os.Exit(m.Run())
}

// res is one observable result.
type res struct {
	Ret     int
	Err     unix.Errno
	Blocked bool
	Idle    bool // no call in flight
	Vals    []uint16
	DS      *dsView
	Info    *Seminfo
}

// dsView is what a scenario may observe of a semid_ds: times only as
// set or not, since the two runs do not happen in the same second.
type dsView struct {
	Perm     ipcns.Perm
	OtimeSet bool
	CtimeSet bool
	Nsems    int
}

func (r res) String() string {
	var b strings.Builder
	if r.Blocked {
		return "blocked"
	}
	if r.Idle {
		return "idle"
	}
	fmt.Fprintf(&b, "ret=%d", r.Ret)
	if r.Err != 0 {
		fmt.Fprintf(&b, " err=%s", unix.ErrnoName(r.Err))
	}
	if r.Vals != nil {
		fmt.Fprintf(&b, " vals=%v", r.Vals)
	}
	if r.DS != nil {
		fmt.Fprintf(&b, " ds=%+v", *r.DS)
	}
	if r.Info != nil {
		fmt.Fprintf(&b, " info=%+v", *r.Info)
	}
	return b.String()
}

// ctlArg is semctl's fourth argument.
type ctlArg struct {
	Val  int
	Vals []uint16
	// Set is IPC_SET's uid, gid, mode.
	UID, GID uint32
	Mode     uint16
}

// world is where a scenario runs. Actor 0 is the scenario's own process;
// actors made by spawn are separate processes. Only spawned actors may
// block.
type world interface {
	spawn(t *testing.T) int
	// spawnInPidNS makes an actor that is pid 1 of a new pid namespace.
	spawnInPidNS(t *testing.T) int
	// setCreds makes actor a an unprivileged uid/gid (spawned actors only).
	setCreds(t *testing.T, a int, uid, gid uint32, groups ...uint32)
	semget(a int, key int32, nsems, flg int) res
	semop(a int, id int, sops []Sembuf, timeout *unix.Timespec) res
	// wait returns the result of actor a's semop once it has returned,
	// blocked if it still sleeps, idle if it has no call in flight.
	wait(t *testing.T, a int) res
	// waitDone waits for actor a's semop to return (a timeout, a signal).
	waitDone(t *testing.T, a int) res
	semctl(a int, id, num, cmd int, arg ctlArg) res
	// setSemLimits sets kernel.sem ("SEMMSL SEMMNS SEMOPM SEMMNI").
	setSemLimits(t *testing.T, v string)
	// proc returns /proc/sysvipc/sem with non-zero times shown as T.
	proc(t *testing.T) string
	// setNextID sets kernel.sem_next_id.
	setNextID(t *testing.T, id int)
	exit(t *testing.T, a int)
	kill(t *testing.T, a int)
	// interrupt ends actor a's sleep as a signal would.
	interrupt(t *testing.T, a int)
}

// runBoth runs scenario against the kernel and the engine and compares the
// logs it records.
func runBoth(t *testing.T, scenario func(t *testing.T, w world, log func(string, res))) {
	t.Helper()
	if !kernelipc.Available() {
		t.Skip("cannot create IPC namespaces (need CAP_SYS_ADMIN)")
	}
	// The engine runs first: its log tells the kernel side which calls
	// are expected to have returned (see kernelWorld.patience).
	var klog, elog []string
	ew := newEngineWorld()
	scenario(t, ew, func(what string, r res) { elog = append(elog, what+": "+r.String()) })
	ew.close()
	err := kernelipc.InFreshNamespace(func() {
		diverged := false // once the logs differ, the engine's is no guide
		kw := &kernelWorld{patience: func() time.Duration {
			if i := len(klog); !diverged && i < len(elog) && !strings.HasSuffix(elog[i], ": blocked") {
				return lateWake
			}
			return 0
		}}
		defer kw.close()
		scenario(t, kw, func(what string, r res) {
			klog = append(klog, what+": "+r.String())
			if i := len(klog) - 1; i >= len(elog) || klog[i] != elog[i] {
				diverged = true
			}
		})
	})
	if err != nil {
		t.Fatalf("kernel run: %v\nlog so far:\n%s", err, strings.Join(klog, "\n"))
	}
	if testing.Verbose() {
		t.Logf("kernel log:\n%s", strings.Join(klog, "\n"))
	}
	if !reflect.DeepEqual(klog, elog) {
		n := max(len(klog), len(elog))
		var b strings.Builder
		for i := 0; i < n; i++ {
			var k, e string
			if i < len(klog) {
				k = klog[i]
			}
			if i < len(elog) {
				e = elog[i]
			}
			mark := "  "
			if k != e {
				mark = "!!"
			}
			fmt.Fprintf(&b, "%s kernel: %s\n   engine: %s\n", mark, k, e)
		}
		t.Fatalf("kernel and engine differ:\n%s", b.String())
	}
}

// ---- kernel ----

type kernelWorld struct {
	actors []*kernelipc.Actor // index a-1
	// patience returns how long an actor seen asleep is given to return
	// before the next log entry records it as blocked: lateWake when the
	// engine's log says the call returned, 0 otherwise. A kernel wakeup
	// can reach the sleeper late (kernelipc.Actor.SettleWithin), and
	// only this keeps such a wakeup from failing the comparison; a call
	// that the kernel really leaves asleep is still recorded as blocked.
	patience func() time.Duration
}

// lateWake bounds how late a kernel wakeup may reach a sleeper that the
// engine's run says was woken.
const lateWake = 2 * time.Second

func (w *kernelWorld) close() {
	for _, a := range w.actors {
		if a != nil {
			a.Kill()
		}
	}
}

func (w *kernelWorld) spawn(t *testing.T) int {
	a, err := kernelipc.StartActor()
	if err != nil {
		t.Fatal(err)
	}
	w.actors = append(w.actors, a)
	return len(w.actors)
}

func (w *kernelWorld) spawnInPidNS(t *testing.T) int {
	a, err := kernelipc.StartActorInNewPidNS()
	if err != nil {
		t.Fatal(err)
	}
	w.actors = append(w.actors, a)
	return len(w.actors)
}

func (w *kernelWorld) setCreds(t *testing.T, a int, uid, gid uint32, groups ...uint32) {
	act := w.actors[a-1]
	gb := make([]byte, 4*len(groups)+4)
	for i, g := range groups {
		binary.LittleEndian.PutUint32(gb[4*i:], g)
	}
	calls := []kernelipc.Call{
		{Nr: unix.SYS_SETGROUPS, Args: [6]uint64{uint64(len(groups)), kernelipc.BufArg(0)}, Bufs: [][]byte{gb}},
		{Nr: unix.SYS_SETRESGID, Args: [6]uint64{uint64(gid), uint64(gid), uint64(gid)}},
		{Nr: unix.SYS_SETRESUID, Args: [6]uint64{uint64(uid), uint64(uid), uint64(uid)}},
	}
	for _, c := range calls {
		r, err := act.Do(c)
		if err != nil || r.Errno != 0 {
			t.Fatalf("setCreds: %v %v", err, r.Errno)
		}
	}
}

func (w *kernelWorld) actor(a int) *kernelipc.Actor { return w.actors[a-1] }

func kres(ret int, e unix.Errno) res {
	if e != 0 {
		return res{Ret: -1, Err: e}
	}
	return res{Ret: ret}
}

func (w *kernelWorld) semget(a int, key int32, nsems, flg int) res {
	if a == 0 {
		return kres(kernelipc.Semget(key, nsems, flg))
	}
	r, err := w.actor(a).Do(kernelipc.Call{Nr: unix.SYS_SEMGET, Args: [6]uint64{uint64(uint32(key)), uint64(nsems), uint64(flg)}})
	if err != nil {
		panic(err)
	}
	return kres(int(r.Ret), r.Errno)
}

func sopsBytes(sops []Sembuf) []byte {
	b := make([]byte, 6*len(sops))
	for i, s := range sops {
		binary.LittleEndian.PutUint16(b[6*i:], s.Num)
		binary.LittleEndian.PutUint16(b[6*i+2:], uint16(s.Op))
		binary.LittleEndian.PutUint16(b[6*i+4:], uint16(s.Flg))
	}
	return b
}

func (w *kernelWorld) semop(a int, id int, sops []Sembuf, timeout *unix.Timespec) res {
	if a == 0 {
		ks := make([]kernelipc.Sembuf, len(sops))
		for i, s := range sops {
			ks[i] = kernelipc.Sembuf(s)
		}
		return kres(kernelipc.Semtimedop(id, ks, timeout))
	}
	c := kernelipc.Call{Nr: unix.SYS_SEMTIMEDOP, Args: [6]uint64{uint64(id), kernelipc.BufArg(0), uint64(len(sops))}, Bufs: [][]byte{sopsBytes(sops)}}
	if timeout != nil {
		tb := make([]byte, 16)
		binary.LittleEndian.PutUint64(tb, uint64(timeout.Sec))
		binary.LittleEndian.PutUint64(tb[8:], uint64(timeout.Nsec))
		c.Bufs = append(c.Bufs, tb)
		c.Args[3] = kernelipc.BufArg(1)
	}
	act := w.actor(a)
	if err := act.Start(c); err != nil {
		panic(err)
	}
	done, r, err := act.SettleWithin(w.patience())
	if err != nil {
		panic(err)
	}
	if !done {
		return res{Blocked: true}
	}
	return kres(int(r.Ret), r.Errno)
}

func (w *kernelWorld) waitDone(t *testing.T, a int) res {
	r, err := w.actor(a).Result()
	if err != nil {
		t.Fatal(err)
	}
	return kres(int(r.Ret), r.Errno)
}

func (w *kernelWorld) wait(t *testing.T, a int) res {
	if !w.actor(a).Busy() {
		return res{Idle: true}
	}
	done, r, err := w.actor(a).SettleWithin(w.patience())
	if err != nil {
		t.Fatal(err)
	}
	if !done {
		return res{Blocked: true}
	}
	return kres(int(r.Ret), r.Errno)
}

const semidDSSize = 104

func (w *kernelWorld) semctl(a int, id, num, cmd int, arg ctlArg) res {
	var buf []byte
	var word uint64
	useBuf := true
	switch cmd {
	case SetVal:
		word, useBuf = uint64(uint32(arg.Val)), false
	case GetVal, GetPID, GetNCnt, GetZCnt, ipcns.IPCRmid:
		useBuf = false
	case GetAll:
		buf = make([]byte, 2*len(arg.Vals))
	case SetAll:
		buf = make([]byte, 2*len(arg.Vals))
		for i, v := range arg.Vals {
			binary.LittleEndian.PutUint16(buf[2*i:], v)
		}
	case ipcns.IPCStat, SemStat, SemStatAny:
		buf = make([]byte, semidDSSize)
	case ipcns.IPCSet:
		buf = make([]byte, semidDSSize)
		binary.LittleEndian.PutUint32(buf[4:], arg.UID)
		binary.LittleEndian.PutUint32(buf[8:], arg.GID)
		binary.LittleEndian.PutUint32(buf[20:], uint32(arg.Mode))
	case ipcns.IPCInfo, SemInfo:
		buf = make([]byte, 40)
	default:
		useBuf = false
	}
	var ret int
	var e unix.Errno
	if a == 0 {
		if useBuf {
			ret, e = kernelipc.SemctlBuf(id, num, cmd, buf)
		} else {
			ret, e = kernelipc.Semctl(id, num, cmd, uintptr(word))
		}
	} else {
		c := kernelipc.Call{Nr: unix.SYS_SEMCTL, Args: [6]uint64{uint64(id), uint64(num), uint64(cmd), word}}
		if useBuf {
			c.Args[3] = kernelipc.BufArg(0)
			c.Bufs = [][]byte{buf}
		}
		r, err := w.actor(a).Do(c)
		if err != nil {
			panic(err)
		}
		ret, e = int(r.Ret), r.Errno
		if useBuf {
			buf = r.Bufs[0]
		}
	}
	r := kres(ret, e)
	if e != 0 {
		return r
	}
	le := binary.LittleEndian
	switch cmd {
	case GetPID:
		r.Ret = w.actorOf(ret)
	case GetAll:
		r.Vals = make([]uint16, len(arg.Vals))
		for i := range r.Vals {
			r.Vals[i] = le.Uint16(buf[2*i:])
		}
	case ipcns.IPCStat, SemStat, SemStatAny:
		r.DS = &dsView{
			Perm: ipcns.Perm{Key: int32(le.Uint32(buf[0:])), UID: le.Uint32(buf[4:]), GID: le.Uint32(buf[8:]),
				CUID: le.Uint32(buf[12:]), CGID: le.Uint32(buf[16:]), Mode: uint16(le.Uint32(buf[20:])), Seq: le.Uint16(buf[24:])},
			OtimeSet: le.Uint64(buf[48:]) != 0, CtimeSet: le.Uint64(buf[64:]) != 0, Nsems: int(le.Uint64(buf[80:])),
		}
	case ipcns.IPCInfo, SemInfo:
		var si Seminfo
		f := []*int32{&si.Semmap, &si.Semmni, &si.Semmns, &si.Semmnu, &si.Semmsl, &si.Semopm, &si.Semume, &si.Semusz, &si.Semvmx, &si.Semaem}
		for i, p := range f {
			*p = int32(le.Uint32(buf[4*i:]))
		}
		r.Info = &si
	}
	return r
}

// actorOf maps a pid to the actor number a scenario sees (0 for the
// scenario's process, -1 for pid 0, 1000+pid for an unknown pid).
func (w *kernelWorld) actorOf(pid int) int {
	if pid == 0 {
		return -1
	}
	if pid == os.Getpid() {
		return 0
	}
	for i, a := range w.actors {
		if a != nil && a.Pid == pid {
			return i + 1
		}
	}
	return 1000 + pid
}

func (w *kernelWorld) setSemLimits(t *testing.T, v string) {
	if err := os.WriteFile("/proc/sys/kernel/sem", []byte(v), 0); err != nil {
		t.Fatal(err)
	}
}

func (w *kernelWorld) proc(t *testing.T) string {
	b, err := os.ReadFile("/proc/sysvipc/sem")
	if err != nil {
		t.Fatal(err)
	}
	return maskTimes(string(b))
}

// maskTimes replaces the last two columns (otime, ctime: " %10d %10d" at
// the end of each row) by 0 or T, since the two runs happen at different
// times.
func maskTimes(s string) string {
	lines := strings.Split(s, "\n")
	for i := 1; i < len(lines); i++ {
		line := lines[i]
		if len(line) < 22 {
			continue
		}
		masked := line[:len(line)-22]
		for _, col := range strings.Fields(line[len(line)-22:]) {
			if col != "0" {
				col = "T"
			}
			masked += fmt.Sprintf(" %10s", col)
		}
		lines[i] = masked
	}
	return strings.Join(lines, "\n")
}

func (w *kernelWorld) setNextID(t *testing.T, id int) {
	// The sysctl acts on the writer's IPC namespace: this thread's.
	if err := os.WriteFile("/proc/sys/kernel/sem_next_id", []byte(fmt.Sprint(id)), 0); err != nil {
		t.Fatal(err)
	}
}

func (w *kernelWorld) exit(t *testing.T, a int) {
	if err := w.actor(a).Exit(); err != nil {
		t.Fatalf("actor exit: %v", err)
	}
}

func (w *kernelWorld) kill(t *testing.T, a int) { w.actor(a).Kill() }

func (w *kernelWorld) interrupt(t *testing.T, a int) {
	// SIGSTOP then SIGCONT: the sleep ends with EINTR and the actor, which
	// has no handler, goes on.
	act := w.actor(a)
	if err := act.Signal(unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, act.Pid, 'T')
	if err := act.Signal(unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

func waitState(t *testing.T, pid int, state byte) {
	for i := 0; i < 5000; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil {
			s := string(b)
			if j := strings.LastIndexByte(s, ')'); j > 0 && s[j+2] == state {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("pid %d never reached state %c", pid, state)
}

// ---- engine ----

type engineActor struct {
	c      *ipcns.Caller
	cancel context.CancelFunc
	result chan error
	gone   bool
}

type engineWorld struct {
	e      *Engine
	root   *ipcns.PidNamespace
	actors []*engineActor // index a
}

func newEngineWorld() *engineWorld {
	ns := ipcns.NewResources("test", ipcns.DefaultLimits())
	root := ipcns.NewPidNamespace(nil, 1)
	w := &engineWorld{e: New(ns), root: root}
	main := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(root, 100)}
	// This sandbox's root lacks CAP_SYS_RESOURCE; so does the engine's.
	main.Creds.Caps &^= 1 << ipcns.CapSysResource
	w.actors = append(w.actors, &engineActor{c: main})
	return w
}

func (w *engineWorld) close() {
	for _, a := range w.actors {
		if a.cancel != nil {
			a.cancel()
		}
	}
}

func (w *engineWorld) spawn(t *testing.T) int {
	c := &ipcns.Caller{Creds: w.actors[0].c.Creds, Pid: ipcns.NewPid(w.root, int32(100+len(w.actors)))}
	w.actors = append(w.actors, &engineActor{c: c})
	return len(w.actors) - 1
}

func (w *engineWorld) spawnInPidNS(t *testing.T) int {
	n := len(w.actors)
	ns := ipcns.NewPidNamespace(w.root, uint64(n+2))
	c := &ipcns.Caller{Creds: w.actors[0].c.Creds, Pid: ipcns.NewPid(ns, int32(100+n), 1)}
	w.actors = append(w.actors, &engineActor{c: c})
	return n
}

func (w *engineWorld) setCreds(t *testing.T, a int, uid, gid uint32, groups ...uint32) {
	w.actors[a].c.Creds = ipcns.UserCreds(uid, gid, groups...)
}

func eres(ret int, err error) res {
	if err != nil {
		return res{Ret: -1, Err: err.(unix.Errno)}
	}
	return res{Ret: ret}
}

func (w *engineWorld) semget(a int, key int32, nsems, flg int) res {
	id, err := w.e.Semget(w.actors[a].c, key, nsems, flg)
	return eres(int(id), err)
}

func (w *engineWorld) semop(a int, id int, sops []Sembuf, timeout *unix.Timespec) res {
	act := w.actors[a]
	ctx, cancel := context.WithCancel(context.Background())
	act.cancel = cancel
	act.result = make(chan error, 1)
	op := &Op{SemID: int32(id), Sops: append([]Sembuf(nil), sops...), Timeout: timeout}
	go func() { act.result <- w.e.Semop(ctx, act.c, op) }()
	return w.settle(act)
}

// settle waits until actor act's semop has returned or sleeps.
func (w *engineWorld) settle(act *engineActor) res {
	if act.result == nil {
		return res{Idle: true}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-act.result:
			act.cancel()
			act.result = nil
			return eres(0, err)
		default:
		}
		for _, wi := range w.e.Waiters() {
			if wi.Pid == act.c.Pid {
				return res{Blocked: true}
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	panic("engine semop neither returned nor slept")
}

func (w *engineWorld) wait(t *testing.T, a int) res { return w.settle(w.actors[a]) }

func (w *engineWorld) waitDone(t *testing.T, a int) res {
	act := w.actors[a]
	select {
	case err := <-act.result:
		act.result = nil
		return eres(0, err)
	case <-time.After(10 * time.Second):
		t.Fatal("engine actor: no result")
	}
	return res{}
}

func (w *engineWorld) semctl(a int, id, num, cmd int, arg ctlArg) res {
	c := w.actors[a].c
	sid := int32(id)
	switch cmd {
	case SetVal:
		return eres(0, w.e.SetVal(c, sid, num, arg.Val))
	case GetVal, GetNCnt, GetZCnt:
		return eres(w.e.Get(c, sid, num, cmd))
	case GetPID:
		v, err := w.e.Get(c, sid, num, GetPID)
		r := eres(v, err)
		if err == nil {
			r.Ret = w.actorOf(v)
		}
		return r
	case GetAll:
		vals, err := w.e.GetAll(c, sid)
		r := eres(0, err)
		if err == nil {
			r.Vals = make([]uint16, len(arg.Vals))
			copy(r.Vals, vals)
		}
		return r
	case SetAll:
		return eres(0, w.e.SetAll(c, sid, func(n int) ([]uint16, error) {
			v := make([]uint16, n)
			copy(v, arg.Vals)
			return v, nil
		}))
	case ipcns.IPCStat, SemStat, SemStatAny:
		ds, ret, err := w.e.Stat(c, sid, cmd)
		r := eres(ret, err)
		if err == nil {
			r.DS = &dsView{Perm: ds.Perm, OtimeSet: ds.Otime != 0, CtimeSet: ds.Ctime != 0, Nsems: ds.Nsems}
		}
		return r
	case ipcns.IPCSet:
		return eres(0, w.e.SetPerm(c, sid, arg.UID, arg.GID, arg.Mode))
	case ipcns.IPCRmid:
		return eres(0, w.e.Remove(c, sid))
	case ipcns.IPCInfo, SemInfo:
		si, ret, err := w.e.Info(sid, cmd)
		r := eres(ret, err)
		if err == nil {
			r.Info = &si
		}
		return r
	}
	return eres(0, unix.EINVAL)
}

func (w *engineWorld) actorOf(pid int) int {
	if pid == 0 {
		return -1
	}
	if pid >= 100 && pid < 100+len(w.actors) {
		return pid - 100
	}
	return 1000 + pid
}

func (w *engineWorld) setSemLimits(t *testing.T, v string) {
	lim := *w.e.Resources().Limits()
	if err := lim.SetSem(v); err != nil {
		t.Fatal(err)
	}
	w.e.Resources().SetLimits(lim)
}

func (w *engineWorld) proc(t *testing.T) string { return maskTimes(string(w.e.ProcSysvipc())) }

func (w *engineWorld) setNextID(t *testing.T, id int) { w.e.Registry().SetNextID(id) }

func (w *engineWorld) exit(t *testing.T, a int) {
	w.e.Exit(w.actors[a].c.Pid)
	w.actors[a].gone = true
}

func (w *engineWorld) kill(t *testing.T, a int) {
	act := w.actors[a]
	if act.result != nil {
		act.cancel()
		<-act.result
		act.result = nil
	}
	w.exit(t, a)
}

func (w *engineWorld) interrupt(t *testing.T, a int) {
	w.actors[a].cancel()
}
