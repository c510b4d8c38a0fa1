package memcharge

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// fakeCgroups makes a cgroup v2 tree in a temporary directory: the root
// (no cgroup.freeze, as the kernel's) and below it each of dirs, with
// cgroup.freeze 0 and an empty cgroup.procs.
func fakeCgroups(t *testing.T, dirs ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range dirs {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"cgroup.freeze": "0\n", "cgroup.procs": ""} {
			if err := os.WriteFile(filepath.Join(p, f), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func readProcs(t *testing.T, procs string) string {
	t.Helper()
	b, err := os.ReadFile(procs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A helper is not put in a frozen cgroup (its own cgroup.freeze or an
// ancestor's is 1: it would be frozen too), but in the next place.
func TestSettlePassesFrozen(t *testing.T) {
	root := fakeCgroups(t, "pod", "pod/a", "pod/b", "other")
	places := []Place{
		{Container: "a", Procs: filepath.Join(root, "pod/a/cgroup.procs")},
		{Container: "b", Procs: filepath.Join(root, "pod/b/cgroup.procs")},
	}
	os.WriteFile(filepath.Join(root, "pod/a/cgroup.freeze"), []byte("1\n"), 0o644)
	if c, err := settle(4242, places); err != nil || c != "b" {
		t.Fatalf("a frozen: settled in %q, %v", c, err)
	}
	if got := readProcs(t, places[0].Procs); got != "" {
		t.Fatalf("written into the frozen cgroup: %q", got)
	}
	if got := readProcs(t, places[1].Procs); got != "4242" {
		t.Fatalf("b's cgroup.procs: %q", got)
	}

	// Frozen from above (the pod's cgroup): every place is passed over,
	// and the error says why.
	os.WriteFile(filepath.Join(root, "pod/a/cgroup.freeze"), []byte("0\n"), 0o644)
	os.WriteFile(filepath.Join(root, "pod/cgroup.freeze"), []byte("1\n"), 0o644)
	os.WriteFile(places[1].Procs, nil, 0o644)
	c, err := settle(4242, places)
	if err == nil || !strings.Contains(err.Error(), "frozen") {
		t.Fatalf("pod frozen: settled in %q, %v", c, err)
	}
	if readProcs(t, places[0].Procs)+readProcs(t, places[1].Procs) != "" {
		t.Fatal("written into a cgroup under a frozen one")
	}
	if d := frozenAt(filepath.Join(root, "other")); d != "" {
		t.Fatalf("other reported frozen at %s", d)
	}
	// A v1 memory hierarchy has no cgroup.freeze: never frozen.
	if d := frozenAt(t.TempDir()); d != "" {
		t.Fatalf("a directory without cgroup.freeze reported frozen at %s", d)
	}
}

// A container's cgroup that no longer takes a process (on v2: it became
// a parent with controllers, EBUSY; here a write that fails) sends the
// helper to the cgroup the recorded process is in now, below it; not to
// one elsewhere (a reused pid), and not without a recorded process.
func TestSettleBelowParent(t *testing.T) {
	root := fakeCgroups(t, "pod/a/init.scope", "pod/b", "elsewhere")
	old := memoryCgroupOf
	defer func() { memoryCgroupOf = old }()
	where := map[int]string{
		7: filepath.Join(root, "pod/a/init.scope/cgroup.procs"),
		8: filepath.Join(root, "elsewhere/cgroup.procs"),
	}
	memoryCgroupOf = func(pid int) (string, error) {
		if p, ok := where[pid]; ok {
			return p, nil
		}
		return "", errors.New("no such process")
	}
	// a's cgroup.procs cannot be written (a directory stands for the
	// kernel's EBUSY).
	aProcs := filepath.Join(root, "pod/a/cgroup.procs")
	os.Remove(aProcs)
	os.Mkdir(aProcs, 0o755)
	b := Place{Container: "b", Procs: filepath.Join(root, "pod/b/cgroup.procs")}

	if c, err := settle(4242, []Place{{Container: "a", Procs: aProcs, Pid: 7}, b}); err != nil || c != "a" {
		t.Fatalf("settled in %q, %v", c, err)
	}
	if got := readProcs(t, where[7]); got != "4242" {
		t.Fatalf("init.scope's cgroup.procs: %q", got)
	}
	// Not into that cgroup while it is frozen (the container froze a
	// cgroup of its own).
	os.WriteFile(where[7], nil, 0o644)
	os.WriteFile(filepath.Join(root, "pod/a/init.scope/cgroup.freeze"), []byte("1\n"), 0o644)
	if c, err := settle(4242, []Place{{Container: "a", Procs: aProcs, Pid: 7}, b}); err != nil || c != "b" || readProcs(t, where[7]) != "" {
		t.Fatalf("init.scope frozen: settled in %q, %v", c, err)
	}
	os.WriteFile(filepath.Join(root, "pod/a/init.scope/cgroup.freeze"), []byte("0\n"), 0o644)
	os.WriteFile(b.Procs, nil, 0o644)
	for _, pid := range []int{8, 9, 0} {
		if c, err := settle(4243, []Place{{Container: "a", Procs: aProcs, Pid: pid}, b}); err != nil || c != "b" {
			t.Fatalf("pid %d: settled in %q, %v", pid, c, err)
		}
	}
	if got := readProcs(t, where[8]); got != "" {
		t.Fatalf("written outside the container's cgroup: %q", got)
	}
	// No place takes it: the error names each refusal.
	_, err := settle(4244, []Place{{Container: "a", Procs: aProcs, Pid: 8}})
	if err == nil || !strings.Contains(err.Error(), "not below") || !strings.Contains(err.Error(), aProcs) {
		t.Fatalf("no place: %v", err)
	}
}

// leafBelow takes only a cgroup strictly below the recorded one (a
// sibling whose name starts with the same letters is not below).
func TestLeafBelow(t *testing.T) {
	old := memoryCgroupOf
	defer func() { memoryCgroupOf = old }()
	for now, ok := range map[string]bool{
		"/cg/pod/a/init.scope/cgroup.procs": true,
		"/cg/pod/a/cgroup.procs":            false,
		"/cg/pod/ab/cgroup.procs":           false,
		"/cg/pod/cgroup.procs":              false,
	} {
		memoryCgroupOf = func(int) (string, error) { return now, nil }
		got, err := leafBelow(1, "/cg/pod/a/cgroup.procs")
		if (err == nil) != ok || ok && got != now {
			t.Errorf("%s: %q, %v", now, got, err)
		}
	}
}

// A helper that dies answering twice refuses the charge only if it died
// for want of memory (otherDeath): killed (the pod's OOM killer), or its
// runtime's fatal exit for memory. One whose runtime the pod's pids.max
// (cgroup v2) left without a thread (EAGAIN), or that ends otherwise,
// leaves the charge counted, not refused.
func TestHelperDeathKinds(t *testing.T) {
	for _, c := range []struct {
		name, end string
		want      error
	}{
		// The Go runtime at the pod's pids.max (cgroup v2): not memory.
		{"no thread (EAGAIN)", "echo 'runtime: failed to create new OS thread (have 4 already; errno=11)' >&2; exit 2", nil},
		// Its thread's stack refused by the full memory cgroup, or
		// its heap: memory.
		{"no thread (ENOMEM)", "echo 'runtime: failed to create new OS thread (have 4 already; errno=12)' >&2; exit 2", ipcns.ErrNoMemory},
		{"runtime out of memory", "echo 'fatal error: runtime: out of memory' >&2; exit 2", ipcns.ErrNoMemory},
		{"own error", "exit 1", nil},
		{"terminated", "kill -TERM $$", nil}, // systemd stopping a scope
		{"killed", "kill -9 $$", ipcns.ErrNoMemory},
	} {
		t.Run(c.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "dying-helper")
			// It takes the request, then ends without answering.
			if err := os.WriteFile(script, []byte("#!/bin/sh\nhead -c 24 <&4 >/dev/null\n"+c.end+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			old := exe
			exe = func() string { return script }
			defer func() { exe = old }()
			root := fakeCgroups(t, "pod")
			b, err := New(t.Name(), func() ([]Place, error) {
				return []Place{{Container: "ctr", Procs: filepath.Join(root, "pod/cgroup.procs")}}, nil
			}, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.Charge(Granule); err != c.want {
				t.Fatalf("charge: %v, want %v", err, c.want)
			}
			if c.want == nil && b.Backed() {
				t.Fatal("charge reported backed")
			}
		})
	}
}

// Inside containerd's shim a reaper waits for every child, and usually
// collects a dead helper's status before exec.Cmd.Wait can: an end not
// known is taken for memory, as every death was before statuses were read
// (a pod at its limit had its charges counted, unbacked, instead of
// refused: TestMemoryChargedToContainer queued 300-500 MB in 64 MiB).
func TestHelperDeathReapedElsewhere(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The reaper's wait4(-1), before ours.
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stderr: &tail{}}
	if err := cmd.Wait(); err == nil {
		t.Fatal("Wait of a child reaped elsewhere succeeded")
	}
	if h.otherDeath() {
		t.Fatal("a helper whose status was collected elsewhere taken for a death other than memory")
	}
	if !strings.Contains(h.end(), "collected elsewhere") {
		t.Fatalf("end: %q", h.end())
	}
}

// The tests' memory cgroups go where the memory controller reaches them:
// below the test's own cgroup on v1 (and on v2 if it enables the
// controller for its children, as the root may), else beside it.
func TestTestCgroupBase(t *testing.T) {
	v1 := t.TempDir()
	if got, err := testCgroupBase(v1); err != nil || got != v1 {
		t.Fatalf("v1: %q, %v", got, err)
	}
	root := t.TempDir()
	mine := filepath.Join(root, "session.scope")
	os.Mkdir(mine, 0o755)
	for _, d := range []string{root, mine} {
		os.WriteFile(filepath.Join(d, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644)
		os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), nil, 0o644)
	}
	if got, err := testCgroupBase(mine); err == nil {
		t.Fatalf("v2, memory enabled nowhere: %q", got)
	}
	os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("cpu memory\n"), 0o644)
	if got, err := testCgroupBase(mine); err != nil || got != root {
		t.Fatalf("v2, memory enabled by the parent: %q, %v", got, err)
	}
	os.WriteFile(filepath.Join(mine, "cgroup.subtree_control"), []byte("memory\n"), 0o644)
	if got, err := testCgroupBase(mine); err != nil || got != mine {
		t.Fatalf("v2, memory enabled by mine: %q, %v", got, err)
	}
}
