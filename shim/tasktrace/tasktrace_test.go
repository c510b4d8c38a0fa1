package tasktrace_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
	"golang.org/x/sys/unix"
)

// init keeps the child's main goroutine on the main thread. Go runs
// package init on the main thread with the main goroutine locked to it;
// a LockOSThread there stays in force, whereas without it the main
// goroutine may move to another thread before TestMain's loop. It did,
// once in ~70 runs of this package: the child's read(2) ran on a second
// thread while TestSignalAndExitEvents waited forever for
// /proc/PID/syscall (the main thread's) to show it.
func init() {
	if os.Getenv("TASKTRACE_CHILD") != "" {
		runtime.LockOSThread()
	}
}

// The child (TASKTRACE_CHILD set): reads, in a loop, a pipe nobody
// writes, after printing the pipe's fd. The Go runtime's handler for
// SIGUSR1 has SA_RESTART. TASKTRACE_CHILD=storm: sends itself SIGUSR1
// without pause instead.
func TestMain(m *testing.M) {
	if os.Getenv("TASKTRACE_CHILD") == "storm" {
		pid := os.Getpid()
		for {
			unix.Tgkill(pid, pid, unix.SIGUSR1)
		}
	}
	if os.Getenv("TASKTRACE_CHILD") != "" {
		// init locked the main goroutine to the main thread: the read
		// below must be the main thread's (tid == pid), the one
		// TestSignalAndExitEvents watches in /proc/PID/syscall and signals.
		var p [2]int
		if err := unix.Pipe(p[:]); err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString(strconv.Itoa(p[0]) + "\n")
		var b [1]byte
		for {
			// Raw read: the runtime's SIGURG and our SIGUSR1 interrupt it
			// and it is reissued.
			unix.Read(p[0], b[:])
		}
	}
	os.Exit(m.Run())
}

func newTracer(t *testing.T) *tasktrace.Tracer {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("no kernel BTF")
	}
	// As root on a kernel with BTF, a failure is the package's: it fails
	// the test (a skip hid a broken loader once).
	tr, err := tasktrace.New()
	if err != nil {
		t.Fatalf("eBPF tracepoints: %v", err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func ipcInode(t *testing.T, pid int) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/ipc", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// backlog holds events drained but not yet matched by waitFor.
var backlog []tasktrace.Event

// waitFor returns the first event, in the kernel's order, that satisfies
// ok, draining as needed; it fails after 10 s.
func waitFor(t *testing.T, tr *tasktrace.Tracer, what string, ok func(*tasktrace.Event) bool) tasktrace.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		tr.Drain(func(e *tasktrace.Event) { backlog = append(backlog, *e) })
		for i, e := range backlog {
			if ok(&e) {
				backlog = append(backlog[:i:i], backlog[i+1:]...)
				return e
			}
		}
		if err := tr.Wait(ctx); err != nil {
			t.Fatalf("no %s event: %v", what, err)
		}
	}
}

func TestSignalAndExitEvents(t *testing.T) {
	tr := newTracer(t)
	backlog = nil
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TASKTRACE_CHILD=1", "GODEBUG=asyncpreemptoff=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWIPC}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var buf [32]byte
	n, _ := out.Read(buf[:])
	fd, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("child said %q", buf[:n])
	}
	pid := cmd.Process.Pid
	if err := tr.Watch(ipcInode(t, pid)); err != nil {
		t.Fatal(err)
	}
	// Wait until the child is asleep in read(fd).
	awaitRead := func() {
		for {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
			if strings.HasPrefix(string(b), "0 0x"+strconv.FormatInt(int64(fd), 16)+" ") {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	awaitRead()
	// A thread-directed signal: generated for the thread, then delivered
	// with the interrupted read's registers.
	before := tasktrace.Now()
	if err := unix.Tgkill(pid, pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	after := tasktrace.Now()
	gen := waitFor(t, tr, "generate", func(e *tasktrace.Event) bool {
		return e.Kind == tasktrace.Generate && e.Sig == int32(unix.SIGUSR1)
	})
	if gen.Tid != int32(pid) || gen.Tgid != int32(pid) || gen.Group {
		t.Errorf("generate: %+v, want tid=tgid=%d, not group", gen, pid)
	}
	// Queued is read inside the tgkill, on the clock Now reads.
	if gen.Queued < before || gen.Queued > after {
		t.Errorf("generate: queued at %d, want within the tgkill [%d, %d]", gen.Queued, before, after)
	}
	del := waitFor(t, tr, "deliver", func(e *tasktrace.Event) bool {
		return e.Kind == tasktrace.Deliver && e.Sig == int32(unix.SIGUSR1)
	})
	if del.Tid != int32(pid) || !del.HasHandler() || del.Flags&tasktrace.SaRestart == 0 {
		t.Errorf("deliver: %+v, want tid %d with an SA_RESTART handler (Go's)", del, pid)
	}
	if !del.Regs.Interrupted() || del.Regs.OrigAx != unix.SYS_READ || del.Regs.Args(false)[0] != uint64(fd) {
		t.Errorf("deliver regs: %+v, want read(%d) interrupted with -ERESTARTSYS", del.Regs, fd)
	}
	// A signal queued without its siginfo (the user is at
	// RLIMIT_SIGPENDING, as in a storm: TRACE_SIGNAL_LOSE_INFO; only a
	// signal whose si_code is negative, as tgkill's, is held to the limit)
	// still wakes the thread: it is reported too.
	if err := unix.Prlimit(pid, unix.RLIMIT_SIGPENDING, &unix.Rlimit{}, nil); err != nil {
		t.Fatal(err)
	}
	awaitRead()
	if err := unix.Tgkill(pid, pid, unix.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	gen = waitFor(t, tr, "generate (lose info)", func(e *tasktrace.Event) bool {
		return e.Kind == tasktrace.Generate && e.Sig == int32(unix.SIGUSR2)
	})
	if gen.Tid != int32(pid) || gen.Group {
		t.Errorf("generate SIGUSR2 at RLIMIT_SIGPENDING: %+v, want tid %d, not group", gen, pid)
	}
	waitFor(t, tr, "deliver (lose info)", func(e *tasktrace.Event) bool {
		return e.Kind == tasktrace.Deliver && e.Sig == int32(unix.SIGUSR2)
	})
	// A process-wide fatal signal: generated for the group, then the
	// exit of its last thread.
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gen = waitFor(t, tr, "generate", func(e *tasktrace.Event) bool {
		return e.Kind == tasktrace.Generate && e.Sig == int32(unix.SIGKILL)
	})
	if !gen.Group || gen.Tgid != int32(pid) {
		t.Errorf("generate SIGKILL: %+v, want group for %d", gen, pid)
	}
	exit := waitFor(t, tr, "exit", func(e *tasktrace.Event) bool { return e.Kind == tasktrace.Exit && e.GroupDead })
	if exit.Tgid != int32(pid) {
		t.Errorf("group exit: %+v, want tgid %d", exit, pid)
	}
	cmd.Wait()
	if lost := tr.Lost(); lost != (tasktrace.Losses{}) {
		t.Errorf("lost events: %+v", lost)
	}
}

// TestSignalStormSparesExits: a process signals itself without pause
// while nobody reads the ring, until the kernel drops signal events, and
// is then killed. Its exit must still be recorded: the last quarter of
// the ring is for exits and execs. (With one ring for all, a storm's
// full ring dropped the exit, and the gateway never applied the
// process's SEM_UNDO.)
func TestSignalStormSparesExits(t *testing.T) {
	tr := newTracer(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TASKTRACE_CHILD=storm")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWIPC}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	if err := tr.Watch(ipcInode(t, pid)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for tr.Lost().Signals == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no signal event dropped after 30 s of a signal storm with nobody reading the ring")
		}
		time.Sleep(time.Millisecond)
	}
	// The thread group whose signal events were dropped is kept, once.
	var tgids []int
	if err := tr.TakeLostSignals(func(tgid int) { tgids = append(tgids, tgid) }); err != nil {
		t.Fatal(err)
	}
	if len(tgids) != 1 || tgids[0] != pid {
		t.Errorf("thread groups whose signal events were dropped: %v, want [%d]", tgids, pid)
	}
	cmd.Process.Kill()
	cmd.Wait() // every thread's exit was recorded (or dropped) by now
	var signals, exits int
	groupDead := false
	tr.Drain(func(e *tasktrace.Event) {
		switch {
		case e.Kind == tasktrace.Exit && e.Tgid == int32(pid):
			exits++
			groupDead = groupDead || e.GroupDead
		case e.Kind == tasktrace.Generate || e.Kind == tasktrace.Deliver:
			signals++
		}
	})
	lost := tr.Lost()
	t.Logf("%d signal events recorded, %d dropped; %d exits of the process's threads recorded, %d exit and exec events dropped",
		signals, lost.Signals, exits, lost.Lifecycle)
	if !groupDead {
		t.Error("the process's exit (its last thread's, group dead) was not recorded")
	}
	if lost.Lifecycle != 0 || lost.Unplaced != 0 {
		t.Errorf("%d exit and exec events dropped, %d signal events whose thread group was not kept", lost.Lifecycle, lost.Unplaced)
	}
}

// TestUnwatchedIsSilent: a process in an IPC namespace nobody watches is
// signalled and exits without a single event.
func TestUnwatchedIsSilent(t *testing.T) {
	tr := newTracer(t)
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWIPC}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if n := tr.Drain(func(e *tasktrace.Event) { t.Errorf("unexpected event %+v", e) }); n != 0 {
		t.Errorf("%d events from an unwatched namespace", n)
	}
}

// TestUseAfterClose reads a closed Tracer, as a gateway's late answer
// does when the gateway is shut down under it (a SIGSEGV in the ring's
// unmapped pages before): nothing is pending, nothing drained, and Lost
// keeps its last value. Readers racing with Close must not fault either.
func TestUseAfterClose(t *testing.T) {
	tr := newTracer(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			tr.Pending()
			tr.Lost()
			tr.Drain(func(*tasktrace.Event) {})
		}
	}()
	lost := tr.Lost()
	tr.Close()
	close(stop)
	<-done
	if tr.Pending() {
		t.Error("Pending after Close")
	}
	if n := tr.Drain(func(*tasktrace.Event) { t.Error("event after Close") }); n != 0 {
		t.Errorf("Drain after Close: %d", n)
	}
	if got := tr.Lost(); got.Signals < lost.Signals || got.Lifecycle < lost.Lifecycle {
		t.Errorf("Lost after Close: %+v, before %+v", got, lost)
	}
	tr.Close() // a second Close does nothing
}

// BenchmarkNow measures the clock read that every SEND now makes
// (Request.sentAt).
func BenchmarkNow(b *testing.B) {
	var sum int64
	for b.Loop() {
		sum += tasktrace.Now()
	}
	if sum == 0 {
		b.Fatal("no time")
	}
}
