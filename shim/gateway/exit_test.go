package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// TestExitUndo: a process takes SEM_UNDO units in its IPC namespace and in
// a second one (unshare), then is killed. Its adjustments must be applied
// in both engines after its exit, as the kernel applies them in both of
// its namespaces; the delay from the exit (wait returned) to the last
// adjustment is logged (the bound is 100 ms). The same program is
// checked natively first.
func TestExitUndo(t *testing.T) {
	bin := buildC(t, "testdata/undoprog.c")
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	// Native oracle: the values seen by the process itself.
	nat := harness.NativeCommand(bin)
	nout, _ := nat.StdoutPipe()
	if err := nat.Start(); err != nil {
		t.Skip(err)
	}
	nline, _ := bufio.NewReader(nout).ReadString('\n')
	nat.Process.Kill()
	nat.Wait()
	if !strings.HasPrefix(nline, "ready 3 2") {
		t.Skipf("native run: %q (needs CAP_SYS_ADMIN)", nline)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng := harness.NewEnginesByInode()
	_, addr, _ := startGateway(ctx, t, eng, nil)
	for _, kill := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		cmd := harness.Command(addr, bin)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != nline {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("trapped %q, native %q", line, nline)
		}
		cmd.Process.Signal(kill)
		cmd.Wait()
		exited := time.Now()
		inos := eng.Inodes()
		if len(inos) < 2 {
			t.Fatalf("%d namespaces served, want 2", len(inos))
		}
		if err := awaitSemval(eng, inos, 0x55, 5, exited.Add(10*time.Second)); err != nil {
			t.Fatalf("%v: SEM_UNDO not applied in all namespaces: %v", kill, err)
		}
		t.Logf("%v: SEM_UNDO applied in %d namespaces %v after the exit", kill, len(inos), time.Since(exited))
	}
}

// TestQueuedActionsRun: a process holding a SEM_UNDO unit is killed and
// its exit is applied by a drain that cannot run what it calls for (the
// one an answer's commit makes, holding an engine lock) while the event
// loop is away from the ring. The SEM_UNDO must still be applied without
// another call: the event loop, woken by the ring, finds it empty, and
// before the fix the adjustment (and any sleeper it would wake) waited
// for the next call the shim served. TestExitUndo failed this way under
// load, when a commit's drain took the exit.
func TestQueuedActionsRun(t *testing.T) {
	bin := buildC(t, "testdata/undoprog.c")
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	// Hold the event loop before it waits for the ring, until released.
	// Every loop that comes is held (an earlier test's gateway winding
	// down may come too); the test waits for its own.
	release, parked := make(chan struct{}), make(chan *gateway.Gateway, 16)
	unhook := gateway.SetEventLoopHook(func(g *gateway.Gateway) {
		select {
		case parked <- g:
		default:
		}
		<-release
	})
	defer unhook()
	var once sync.Once
	releaseLoop := func() { once.Do(func() { close(release) }) }
	defer releaseLoop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng := harness.NewEnginesByInode()
	g, addr, _ := startGateway(ctx, t, eng, nil)
	for held := false; !held; {
		select {
		case pg := <-parked:
			held = pg == g
		case <-ctx.Done():
			t.Fatal("the event loop never reached its wait")
		}
	}
	cmd := harness.Command(addr, bin, "one")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready 3\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("trapped run printed %q, want \"ready 3\"", line)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The exit is reported before the parent's wait returns; drain it
	// the way a commit does.
	for g.Stats.Exits.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the exit was never reported")
		}
		g.SyncEventsLocked()
		time.Sleep(100 * time.Microsecond)
	}
	releaseLoop()
	inos := eng.Inodes()
	if len(inos) != 1 {
		t.Fatalf("%d namespaces served, want 1", len(inos))
	}
	deadline, _ := ctx.Deadline()
	if err := awaitSemval(eng, inos, 0x55, 5, deadline); err != nil {
		t.Fatalf("the killed process's SEM_UNDO was never applied: %v", err)
	}
}

// awaitSemval waits until semaphore 0 of the set with key has the value
// want in the engine of every namespace in inos, asking the engines as a
// caller with every capability would. It returns an error naming each
// namespace still short once deadline has passed, or at the first failed
// semget or GETVAL.
func awaitSemval(eng *harness.EnginesByInode, inos []uint64, key int32, want int, deadline time.Time) error {
	root := &ipcns.Caller{Creds: ipcns.Creds{Caps: ^ipcns.CapSet(0)}}
	for {
		var short []string
		for _, ino := range inos {
			e := eng.Sem(ino)
			id, err := e.Semget(root, key, 1, 0)
			if err != nil {
				return fmt.Errorf("ns %d: semget(%#x): %w", ino, key, err)
			}
			v, err := e.Get(root, id, 0, semengine.GetVal)
			if err != nil {
				return fmt.Errorf("ns %d: GETVAL: %w", ino, err)
			}
			if v != want {
				short = append(short, fmt.Sprintf("ns %d: semval %d", ino, v))
			}
		}
		if len(short) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("want semval %d; %s", want, strings.Join(short, ", "))
		}
		time.Sleep(100 * time.Microsecond)
	}
}
