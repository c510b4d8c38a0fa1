package gateway_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// freezerRoot is the cgroup v1 freezer hierarchy the tests make their
// cgroups in.
const freezerRoot = "/sys/fs/cgroup/freezer"

// freezeCgroup makes a freezer cgroup of its own for the test and removes
// it at the end (its processes have exited by then).
func freezeCgroup(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(freezerRoot, "freezer.state")); err != nil {
		if _, err := os.Stat(filepath.Join(freezerRoot, "cgroup.procs")); err != nil {
			t.Skipf("no cgroup v1 freezer hierarchy at %s", freezerRoot)
		}
	}
	dir := filepath.Join(freezerRoot, fmt.Sprintf("gateway-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("make a freezer cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Never leave it frozen: its processes could not exit. Those
		// of a test that failed early are the test's own: killed.
		_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		for i := 0; ; i++ {
			err := os.Remove(dir)
			if err == nil || os.IsNotExist(err) {
				return
			}
			if i == 500 {
				t.Errorf("remove %s: %v", dir, err)
				return
			}
			time.Sleep(10 * time.Millisecond) // waits for exited processes to leave it
		}
	})
	return dir
}

// freezer is the cgroup a test freezes and thaws, and the gateway that
// serves its processes.
type freezer struct {
	t   *testing.T
	dir string
	g   *gateway.Gateway
	// held, while a freeze is being made, is closed once freezer.state
	// reads FROZEN: the answers the gateway is about to send wait for it.
	held atomic.Pointer[chan struct{}]
	// race, while a racing freeze is being made (freeze_window_test.go),
	// times the answers the gateway is about to send against the write
	// that begins the freeze.
	race atomic.Pointer[raceState]
	// stateFile is freezer.state kept open (stateFd).
	stateFile *os.File
	// fence raises the gateway's fence for a freeze, as the shim's Pause
	// does (g.Freezing if nil); noFence raises none (and makes no failed
	// pauses): a freeze by hand.
	fence   func() func()
	noFence bool
}

// raiseFence raises the gateway's fence for a freeze and returns its end.
func (f *freezer) raiseFence() func() {
	if f.noFence {
		return func() {}
	}
	if f.fence != nil {
		return f.fence()
	}
	return f.g.Freezing()
}

// newFreezer returns the freezer of cgroup dir for gateway g. Until the
// test ends, an answer g is about to send while a freeze is being made
// waits until the freeze is done (gateway.SetAnswerHook), as on a busy
// machine where the answering thread is preempted: on an idle one, the
// task the freezer wakes waits for a CPU that the answering thread leaves
// only once its answer was sent, and a freeze seldom meets an answer.
func newFreezer(t *testing.T, g *gateway.Gateway, dir string) *freezer {
	f := &freezer{t: t, dir: dir, g: g}
	t.Cleanup(gateway.SetAnswerHook(func(r *gateway.Request) {
		if rs := f.race.Load(); rs != nil {
			rs.hold(r)
			return
		}
		if c := f.held.Load(); c != nil {
			<-*c
		}
	}))
	return f
}

// state reads freezer.state.
func (f *freezer) state() string {
	b, err := os.ReadFile(filepath.Join(f.dir, "freezer.state"))
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// set writes want to freezer.state and waits until it reads want: FROZEN
// once every process of the cgroup is frozen. Like runc, a freeze that
// does not complete is asked again.
func (f *freezer) set(want string) { f.await(want, 0) }

// await waits until freezer.state reads want, writing want to it first
// and again every 100 reads from the first'th on (runc asks a freeze that
// does not complete again).
func (f *freezer) await(want string, first int) {
	path := filepath.Join(f.dir, "freezer.state")
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if i >= first && i%100 == 0 {
			if err := os.WriteFile(path, []byte(want), 0); err != nil {
				f.t.Fatal(err)
			}
		}
		if f.state() == want {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: still %s after 30s", path, f.state())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// pause freezes the cgroup and calls the gateway's hooks as the shim's
// Pause does (shim/task/service.go): the fence before the freeze, Frozen
// once frozen, and the fence's end.
func (f *freezer) pause() {
	end := f.raiseFence()
	held := make(chan struct{})
	f.held.Store(&held)
	release := func() {
		if f.held.CompareAndSwap(&held, nil) {
			close(held)
		}
	}
	defer release() // if set fails the test
	f.set("FROZEN")
	release()
	f.g.Frozen()
	end()
}

// failedPause raises the gateway's fence as the shim's Pause does, waits
// until answers were parked behind it, and ends it with no freeze, as
// Pause does when runc pause fails: every parked call still waits, and
// is answered or served again.
func (f *freezer) failedPause() {
	if f.noFence {
		return
	}
	// The count before the fence: calls can park as soon as it is up,
	// and once the program's msgrcv calls are parked the queue fills
	// and no other call parks (answers of 0 go through ADDFD) until the
	// fence's end.
	parked := f.g.Stats.Parked.Load()
	end := f.raiseFence()
	defer end()
	deadline := time.Now().Add(30 * time.Second)
	for f.g.Stats.Parked.Load() == parked {
		if time.Now().After(deadline) {
			logStats(f.t, f.g)
			f.t.Logf("the program's tasks:\n%s", f.tasks())
			f.t.Logf("the test's threads not SCHED_OTHER: %v", rtThreads())
			f.t.Fatal("nothing parked behind the fence after 30s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// tasks describes the cgroup's tasks for a failure: tid, state and
// wait channel of each thread of each process.
func (f *freezer) tasks() string {
	var b strings.Builder
	procs, _ := os.ReadFile(filepath.Join(f.dir, "cgroup.procs"))
	for _, p := range strings.Fields(string(procs)) {
		ents, _ := os.ReadDir(filepath.Join("/proc", p, "task"))
		for _, e := range ents {
			dir := filepath.Join("/proc", p, "task", e.Name())
			stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
			wchan, _ := os.ReadFile(filepath.Join(dir, "wchan"))
			state := "?"
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) {
				state = string(stat[i+2])
			}
			fmt.Fprintf(&b, "  %s/%s %s %s\n", p, e.Name(), state, wchan)
		}
	}
	return b.String()
}

// rtThreads lists the test process's threads whose scheduling policy is
// not SCHED_OTHER (field 41 of /proc/self/task/*/stat).
func rtThreads() []string {
	var rt []string
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		stat, _ := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "stat"))
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		// Fields after the comm start at field 3.
		fs := strings.Fields(string(stat[i+1:]))
		if len(fs) > 38 && fs[38] != "0" {
			rt = append(rt, e.Name()+":policy="+fs[38])
		}
	}
	return rt
}

// resume thaws the cgroup, as the shim's Resume does.
func (f *freezer) resume() { f.set("THAWED") }

// progressFile is the file the child counts its progress in (offset 0)
// and that the test stops it through (offset 8): testdata/freezer.c.
type progressFile struct{ f *os.File }

func newProgressFile(t *testing.T) *progressFile {
	f, err := os.Create(filepath.Join(t.TempDir(), "shared"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	return &progressFile{f}
}

func (p *progressFile) progress() int64 {
	var b [8]byte
	if _, err := p.f.ReadAt(b[:], 0); err != nil {
		return 0
	}
	return int64(binary.NativeEndian.Uint64(b[:]))
}

func (p *progressFile) stop() {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 1)
	_, _ = p.f.WriteAt(b[:], 8)
}

// runFrozen runs testdata/freezer.c in mode under a gateway, in a freezer
// cgroup of its own that it freezes and thaws cycles times while the
// program works, with the program's progress between each freeze (and,
// every tenth time, a pause that fails: the fence with no freeze), then
// stops it and returns its output.
func runFrozen(t *testing.T, h *harness.EnginesByInode, mode string, cycles int) ([]byte, *gateway.Gateway) {
	return runFrozenWith(t, h, mode, cycles, nil, nil)
}

// runFrozenWith is runFrozen with each freeze made by pause, if not nil,
// instead of freezer.pause, and cfg, if not nil, applied to the gateway
// before it serves.
func runFrozenWith(t *testing.T, h *harness.EnginesByInode, mode string, cycles int, pause func(*freezer), cfg func(*gateway.Gateway)) ([]byte, *gateway.Gateway) {
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	bin := buildC(t, "testdata/freezer.c")
	dir := freezeCgroup(t)
	pf := newProgressFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g, addr, served := startGateway(ctx, t, h, cfg)
	cmd := harness.Command(addr, bin, dir, pf.f.Name(), mode)
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	f := newFreezer(t, g, dir)
	n := 0
	// Work between freezes: the program made calls since the last thaw.
	// A program that stops making calls is stuck (a lost unit or
	// message, a call never answered): no timing is asserted, but a
	// stuck run fails with the program's state rather than the binary's
	// timeout.
	waitProgress := func(since int64) bool {
		deadline := time.Now().Add(2 * time.Minute)
		for pf.progress() < since+20 {
			if time.Now().After(deadline) {
				logStats(t, g)
				t.Fatalf("%s: no progress for 2 minutes after %d freezes", mode, n)
			}
			select {
			case err := <-done:
				done <- err
				return false
			case <-time.After(200 * time.Microsecond):
			}
		}
		return true
	}
	start := time.Now()
	for ; n < cycles; n++ {
		if !waitProgress(pf.progress()) {
			break
		}
		if pause != nil {
			pause(f)
		} else {
			f.pause()
		}
		f.resume()
		if n%10 == 9 && waitProgress(pf.progress()) {
			f.failedPause()
		}
	}
	t.Logf("%s: %d freezes in %v, %d calls counted", mode, n, time.Since(start).Round(time.Millisecond), pf.progress())
	pf.stop()
	select {
	case err := <-done:
		if err != nil {
			logStats(t, g)
			t.Fatalf("freezer %s: %v\n%s", mode, err, out.String())
		}
	case <-time.After(3 * time.Minute):
		// Stuck (a call never answered, a unit or message lost): the
		// cleanup kills what is left in the cgroup.
		logStats(t, g)
		t.Fatalf("freezer %s did not end 3 minutes after it was stopped\n%s", mode, out.String())
	}
	if n < cycles {
		t.Errorf("the program ended after %d freezes of %d", n, cycles)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not end after the child exited")
	}
	logStats(t, g)
	return []byte(out.String()), g
}

// TestFreezeConservation freezes and thaws (cgroup v1 freezer, with the
// gateway's hooks called as the shim's Pause calls them) a program whose
// processes move units between semaphores (semop -1 then +1, sleeping
// when a semaphore is empty) and pass numbered messages through a small
// queue (senders and receivers sleep), and checks at the end that no
// unit was lost or made and that every message sent was received exactly
// once. The freezer wakes a task asleep in the trap with no signal: an
// answer the gateway sends as it does so can be discarded by the kernel,
// and the call restarts as a new one (a unit taken twice, a message
// lost), unless the answer waits for the freeze to be known.
func TestFreezeConservation(t *testing.T) {
	cycles := 300
	if testing.Short() {
		cycles = 100
	}
	h := harness.NewEnginesByInode()
	out, _ := runFrozen(t, h, "conserve", cycles)
	checkConserved(t, out)
}

// checkConserved checks the output of testdata/freezer.c's conserve mode:
// every unit still there, every message received exactly once.
func checkConserved(t *testing.T, out []byte) {
	t.Helper()
	t.Logf("%s", strings.TrimSpace(string(out)))
	var total, want, sent, received, lost, dup int
	var hung string
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(l, "sem:"):
			fmt.Sscanf(l, "sem: total %d (want %d)", &total, &want)
		case strings.HasPrefix(l, "msg:"):
			fmt.Sscanf(l, "msg: sent %d, received %d, lost %d, duplicated %d", &sent, &received, &lost, &dup)
			if strings.Contains(l, "hung") {
				hung = " (consumers hung)"
			}
		}
	}
	if want == 0 || sent == 0 {
		t.Fatalf("no result in %q", out)
	}
	if total != want {
		t.Errorf("semaphores hold %d units, want %d", total, want)
	}
	if lost != 0 || dup != 0 || received != sent || hung != "" {
		t.Errorf("messages: sent %d, received %d, lost %d, duplicated %d%s", sent, received, lost, dup, hung)
	}
}

// TestFreezeReplies freezes and thaws, 300 times per mode, processes
// that loop semget(IPC_PRIVATE), SETVAL and IPC_RMID (sem), or
// msgget(IPC_PRIVATE), IPC_SET and IPC_RMID (msg): none of those calls
// fails natively and nothing is left. An answer the gateway sends as the
// freezer takes its caller is lost and the call, restarted, would run
// again (an IPC_RMID failing with EINVAL, a second set made and leaked)
// unless its answer is kept for the restart.
func TestFreezeReplies(t *testing.T) {
	cycles := 300
	if testing.Short() {
		cycles = 100
	}
	for _, mode := range []string{"sem", "msg"} {
		t.Run(mode, func(t *testing.T) {
			h := harness.NewEnginesByInode()
			out, _ := runFrozen(t, h, mode, cycles)
			line := strings.TrimSpace(string(out))
			t.Log(line)
			var created, removed, left int
			if _, err := fmt.Sscanf(line, mode+": created %d, removed %d, left %d", &created, &removed, &left); err != nil {
				t.Fatalf("no result in %q: %v", line, err)
			}
			if !strings.HasSuffix(line, "failures: none") || created != removed || left != 0 {
				t.Errorf("want every call to succeed once and nothing left: %s", line)
			}
			objs := 0
			for _, ino := range h.Inodes() {
				objs += len(h.Sem(ino).Sets()) + len(h.Msg(ino).Queues())
			}
			if objs != 0 {
				t.Errorf("the engines hold %d sets and queues at the end", objs)
			}
		})
	}
}

// TestFreezeFenceScope freezes and thaws the conserve program of
// TestFreezeConservation, served as container "b"
// (ListenerOptions.Container), behind the fence the shim's Pause raises
// for it (FreezingContainer("b")); before each freeze, a fence for
// container "a" is up for 2 ms while "b" works: it must park none of
// "b"'s answers (they are not held up by another container's pause).
// Units and messages must be conserved.
func TestFreezeFenceScope(t *testing.T) {
	cycles := 100
	if testing.Short() {
		cycles = 30
	}
	var other, parkedOther int64
	pause := func(f *freezer) {
		f.fence = func() func() { return f.g.FreezingContainer("b") }
		s := &f.g.Stats
		p := s.Parked.Load()
		end := f.g.FreezingContainer("a")
		time.Sleep(2 * time.Millisecond)
		end()
		other++
		parkedOther += s.Parked.Load() - p
		f.pause()
	}
	cfg := func(g *gateway.Gateway) { g.Defaults.Container = "b" }
	h := harness.NewEnginesByInode()
	out, g := runFrozenWith(t, h, "conserve", cycles, pause, cfg)
	checkConserved(t, out)
	t.Logf("%d fences for another container: %d answers parked behind them; %d parked in all", other, parkedOther, g.Stats.Parked.Load())
	if parkedOther != 0 {
		t.Errorf("a fence for container a parked %d answers of container b", parkedOther)
	}
	if g.Stats.Parked.Load() == 0 {
		t.Error("nothing parked behind container b's own fences")
	}
}
