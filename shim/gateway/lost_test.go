package gateway

import (
	"errors"
	"os/exec"
	"strconv"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
)

// TestSignalLossMarksItsProcess: once a drain finds signal events
// dropped, the thread groups they were about may have a signal the
// gateway did not see: their calls received before it, and their later
// calls until they take a signal, are answered as if a signal may race.
// Other processes are not marked, unless the kernel could not keep which
// thread group a loss was about (Unplaced) or the take failed: then every
// process is. A dropped exit does not mark anything (it asks for a sweep).
func TestSignalLossMarksItsProcess(t *testing.T) {
	g := &Gateway{procs: map[int]*process{}}
	stormer, other := g.signalProcess(1), g.signalProcess(2)
	g.evMu.Lock()
	defer g.evMu.Unlock()
	g.seq = 10
	if g.mayBeSignalled(stormer, 10) || g.mayBeSignalled(other, 10) {
		t.Fatal("a process with no signal event is taken as signalled before any loss")
	}
	lost := tasktrace.Losses{Lifecycle: 1}
	g.lostLocked(lost, nil, nil)
	if g.mayBeSignalled(stormer, 10) || g.mayBeSignalled(other, 10) {
		t.Error("a dropped exit event marked a process as signalled")
	}
	if !g.sweepDue.Load() || len(g.actions) != 1 {
		t.Errorf("a dropped exit event: sweep due %v, %d actions queued; want a sweep and one action to run it", g.sweepDue.Load(), len(g.actions))
	}
	lost.Lifecycle = 2
	g.lostLocked(lost, nil, nil)
	if len(g.actions) != 1 {
		t.Errorf("a second dropped exit before the sweep queued %d actions, want 1", len(g.actions))
	}

	lost.Signals = 5
	g.lostLocked(lost, []int{1}, nil)
	mark := g.seq
	if mark != 11 {
		t.Fatalf("the loss was given sequence number %d, want 11", mark)
	}
	if !g.mayBeSignalled(stormer, 10) || !g.mayBeSignalled(stormer, mark) {
		t.Error("the process whose signal event was dropped is not taken as signalled")
	}
	if g.mayBeSignalled(other, 10) {
		t.Error("a process whose signal events were all seen is taken as signalled")
	}
	// The stormer takes a signal after the loss.
	g.seq++
	stormer.sigDel.Store(g.seq)
	if g.mayBeSignalled(stormer, g.seq) {
		t.Error("a process that took a signal after the loss is still taken as signalled")
	}

	// The same counts seen again mark nothing new.
	seq := g.seq
	g.lostLocked(lost, nil, nil)
	if g.seq != seq {
		t.Errorf("a loss already seen was taken again: seq %d, want %d", g.seq, seq)
	}

	for _, c := range []struct {
		name string
		lost tasktrace.Losses
		err  error
	}{
		{"unplaced", tasktrace.Losses{Signals: 6, Unplaced: 1, Lifecycle: 2}, nil},
		{"take failed", tasktrace.Losses{Signals: 7, Unplaced: 1, Lifecycle: 2}, errors.New("no map")},
	} {
		g.seq++
		other.sigDel.Store(g.seq)
		stormer.sigDel.Store(g.seq)
		g.lostLocked(c.lost, nil, c.err)
		if !g.mayBeSignalled(other, g.seq) || !g.mayBeSignalled(stormer, g.seq) {
			t.Errorf("%s: a loss the kernel could not place did not mark every process", c.name)
		}
	}
	if total := g.lostTotal.Load(); total != (tasktrace.Losses{Signals: 7, Unplaced: 1, Lifecycle: 2}).Total() {
		t.Errorf("lostTotal %d, want the last counts' total", total)
	}
}

// TestReapLostExits: after exit events were dropped, the sweep's reap
// finds the known threads and processes that are gone and applies their
// exits (SEM_UNDO queued for a dead process), and leaves the live ones.
func TestReapLostExits(t *testing.T) {
	start := func() *exec.Cmd {
		c := exec.Command("sleep", "100")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	dead, live := start(), start()
	defer func() { live.Process.Kill(); live.Wait() }()
	dead.Process.Kill()
	dead.Wait()
	g := &Gateway{procs: map[int]*process{}, tasks: map[int]*Task{}, intrs: map[int]*interruption{}}
	ns := ipcns.NewPidNamespace(nil, 1)
	for _, c := range []*exec.Cmd{dead, live} {
		pid := c.Process.Pid
		p := &process{tgid: pid, pid: ipcns.NewPid(ns, int32(pid)), threads: 1}
		g.procs[pid] = p
		g.tasks[pid] = &Task{Tid: pid, Tgid: pid, pidfd: -1, proc: p}
	}
	g.reapLost()
	if _, ok := g.tasks[dead.Process.Pid]; ok {
		t.Error("the dead process's thread is still known")
	}
	if _, ok := g.procs[dead.Process.Pid]; ok {
		t.Error("the dead process is still known")
	}
	if g.tasks[live.Process.Pid] == nil || g.procs[live.Process.Pid] == nil {
		t.Error("the live process was reaped")
	}
	if n := g.Stats.Exits.Load(); n != 1 {
		t.Errorf("%d exits applied, want 1 (the dead process's, for its SEM_UNDO)", n)
	}
	if !procGone("/proc/" + strconv.Itoa(dead.Process.Pid)) {
		t.Error("procGone: a reaped process is not gone")
	}
	if procGone("/proc/" + strconv.Itoa(live.Process.Pid)) {
		t.Error("procGone: a live process is gone")
	}
}
