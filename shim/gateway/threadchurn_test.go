package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// TestThreadChurn (issue 11): one process runs 100,000 short-lived
// threads (5,000 with -short), four at a time, each making one semop on a
// shared set, under a gateway that keeps a pidfd per thread (IDsFixed
// false, as for a profile that lets ids change). Every semop must
// succeed and the set hold exactly their sum; and, while the process is
// still alive, the gateway's state must be back to what it was before
// the threads: one Task (the main thread), one process, the test
// process's fd count at its baseline. A thread's state is released at
// the thread's exit, not its process's (21k threads used to exhaust the
// shim's fds, then semop failed with ESRCH). The threads' SEM_UNDO
// adjustments must survive their exits and be applied at the process's.
func TestThreadChurn(t *testing.T) {
	bin := buildC(t, "testdata/threadchurn.c")
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	// 100,000 threads (issue 11's figure) take 29 s on a quiet 2-CPU
	// machine and over 2 minutes beside stress-ng: the default run uses
	// 20,000, GATEWAY_CHURN sets another count.
	n := 20000
	if testing.Short() {
		n = 5000
	}
	if v, err := strconv.Atoi(os.Getenv("GATEWAY_CHURN")); err == nil && v > 0 {
		n = v
	}
	const key = 0x7c
	// No deadline of the test's own: how long n threads take depends on
	// the machine's load, not only on the gateway. The deadline this test
	// had, n ms + 1 min ("each thread is served in well under a
	// millisecond even loaded"), was passed beside stress-ng and other
	// builds (load average 23 on 2 CPUs: 20,000 threads took 67 s in one
	// run and over 80 s in another); the gateway, stopped by the expired
	// context, closed the listener and the child's next call, its GETALL,
	// failed with ENOSYS ("GETALL: Function not implemented", then
	// "child: \"\", EOF"). A hang is caught by go test's -timeout, which
	// also dumps every goroutine.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng := harness.NewEnginesByInode()
	g, addr, served := startGateway(ctx, t, eng, func(g *gateway.Gateway) {
		g.Defaults.IDsFixed = false // a pidfd per thread: what must be released
	})
	cmd := harness.Command(addr, bin, strconv.Itoa(n), "4")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	out := bufio.NewReader(stdout)
	readLine := func() string {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("child: %q, %v", line, err)
		}
		return strings.TrimSpace(line)
	}
	if line := readLine(); line != "ready" {
		t.Fatalf("child: %q", line)
	}
	// The main thread's semget was served: its Task and pidfd are in.
	g.SyncEvents()
	tasks0, procs0 := g.Tables()
	base := fdCount(t)
	t.Logf("baseline: %d fds, %d tasks, %d processes", base, tasks0, procs0)

	var peak, peakTasks atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if c := int64(fdCount(nil)); c > peak.Load() {
				peak.Store(c)
			}
			if tk, _ := g.Tables(); int64(tk) > peakTasks.Load() {
				peakTasks.Store(int64(tk))
			}
		}
	}()
	start := time.Now()
	io.WriteString(stdin, "go\n")
	done := readLine()
	elapsed := time.Since(start)
	close(stop)
	<-sampled
	if want := fmt.Sprintf("done %d failures 0 values %d %d", n, n, n); done != want {
		rest, _ := out.ReadString('\n')
		t.Fatalf("child: %q %q, want %q", done, rest, want)
	}

	// Every thread has exited, the process has not: its threads' state
	// must be gone, its own kept.
	var fds, tasks, procs int
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.SyncEvents()
		tasks, procs = g.Tables()
		fds = fdCount(t)
		if tasks <= tasks0 && procs <= procs0 && fds <= base {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after %d threads exited: %d fds (baseline %d), %d tasks (%d), %d processes (%d)",
				n, fds, base, tasks, tasks0, procs, procs0)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d threads, one semop each, 0 failures in %v; fds: baseline %d, peak %d, after %d; tasks: peak %d, after %d",
		n, elapsed.Round(time.Millisecond), base, peak.Load(), fds, peakTasks.Load(), tasks)
	if sig, exit := g.Stats.SignalEventsLost.Load(), g.Stats.ExitEventsLost.Load(); sig != 0 || exit != 0 {
		t.Errorf("kernel events lost: %d signal, %d exit and exec", sig, exit)
	}
	if procs != 1 || tasks != 1 {
		t.Errorf("alive process with no threads but its main one: %d tasks, %d processes, want 1 and 1", tasks, procs)
	}

	// The process exits: its SEM_UNDO adjustments (n units on semaphores
	// 8-15), kept through its threads' exits, are applied now.
	io.WriteString(stdin, "exit\n")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	// Serve ends with the child's exit (a hang: go test's -timeout).
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	inos := eng.Inodes()
	if len(inos) != 1 {
		t.Fatalf("%d namespaces served, want 1", len(inos))
	}
	e := eng.Sem(inos[0])
	root := &ipcns.Caller{Creds: ipcns.Creds{Caps: ^ipcns.CapSet(0)}}
	id, err := e.Semget(root, key, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		g.SyncEvents()
		var plain, undone int
		for i := 0; i < 16; i++ {
			v, err := e.Get(root, id, i, semengine.GetVal)
			if err != nil {
				t.Fatal(err)
			}
			if i < 8 {
				plain += v
			} else {
				undone += v
			}
		}
		tasks, procs = g.Tables()
		if plain == n && undone == 0 && tasks == 0 && procs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the process's exit: semaphores 0-7 sum to %d (want %d), 8-15 to %d (want 0: SEM_UNDO); %d tasks, %d processes",
				plain, n, undone, tasks, procs)
		}
		time.Sleep(time.Millisecond)
	}
}

// fdCount returns the number of fds the test process (the gateway's host)
// has open; t nil: -1 on error (off the test's goroutine).
func fdCount(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		if t == nil {
			return -1
		}
		t.Fatal(err)
	}
	return len(ents)
}
