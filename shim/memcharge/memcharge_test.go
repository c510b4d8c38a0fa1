package memcharge

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == HelperArg {
		os.Exit(HelperMain())
	}
	os.Exit(m.Run())
}

// testCgroup makes a memory cgroup limited to limit bytes beside the
// shim's and returns its directory and its usage file.
func testCgroup(t testing.TB, limit int64) (dir, usage string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a memory cgroup")
	}
	procs, err := MemoryCgroup(os.Getpid())
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	base, err := testCgroupBase(filepath.Dir(procs))
	if err != nil {
		t.Skip(err)
	}
	dir = filepath.Join(base, "memcharge-test-"+strconv.Itoa(os.Getpid())+"-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("make a memory cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	limitFile, usageFile := "memory.max", "memory.current"
	if _, err := os.Stat(filepath.Join(dir, "memory.limit_in_bytes")); err == nil {
		limitFile, usageFile = "memory.limit_in_bytes", "memory.usage_in_bytes"
	}
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Skipf("limit a memory cgroup: %v", err)
	}
	return dir, filepath.Join(dir, usageFile)
}

// testCgroupBase returns where a test makes its memory cgroups, given
// mine, the test process's: below it on cgroup v1. On v2 a child has the
// memory controller only if its parent enables it (cgroup.subtree_control),
// which the no-internal-process rule refuses while the test's process is
// in mine (kernel/cgroup/cgroup.c: cgroup_vet_subtree_control_enable,
// EBUSY), but for the root: then beside mine, if mine's parent enables it.
func testCgroupBase(mine string) (string, error) {
	if _, err := os.Stat(filepath.Join(mine, "cgroup.controllers")); err != nil {
		return mine, nil // v1
	}
	enables := func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		return err == nil && slices.Contains(strings.Fields(string(b)), "memory")
	}
	if enables(mine) {
		return mine, nil
	}
	parent := filepath.Dir(mine)
	if _, err := os.Stat(filepath.Join(parent, "cgroup.controllers")); err == nil && enables(parent) {
		return parent, nil
	}
	return "", fmt.Errorf("cgroup v2: no memory controller for a test cgroup: %s does not enable it for its children (cgroup.subtree_control), and the test's process in it keeps it from doing so (no-internal-process rule), nor does its parent", mine)
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newBallast(t *testing.T, dir string) *Ballast {
	t.Helper()
	b, err := New(t.Name(), func() ([]Place, error) {
		return []Place{{Container: "ctr", Procs: filepath.Join(dir, "cgroup.procs")}}, nil
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// A charge is in the cgroup's usage, within the granules of slack, and
// leaves it when uncharged.
func TestChargeReachesCgroup(t *testing.T) {
	dir, usage := testCgroup(t, 256<<20)
	b := newBallast(t, dir)
	// The first charge starts the helper, whose own pages (a few MiB, many
	// more for a race-detector build) are the cgroup's too: measure from
	// there.
	if err := b.Charge(1); err != nil {
		t.Fatal(err)
	}
	b.Uncharge(1)
	before := readInt(t, usage)
	const n = 16 << 20
	for i := 0; i < n/4096; i++ { // as messages would come
		if err := b.Charge(4096); err != nil {
			t.Fatalf("charge %d: %v", i, err)
		}
	}
	// The ballast runs up to two granules ahead of the charge (it held
	// two already), and the cgroup's count lags by per-CPU batches of up
	// to 64 pages: four granules either way.
	got := readInt(t, usage) - before
	if got < n-4*Granule || got > n+4*Granule {
		t.Fatalf("cgroup usage grew by %d bytes for %d charged", got, n)
	}
	if !b.Backed() {
		t.Fatal("charges not backed")
	}
	for i := 0; i < n/4096; i++ {
		b.Uncharge(4096)
	}
	if charged, held := b.Usage(); charged != 0 || held > 4*Granule {
		t.Fatalf("after uncharging all: charged %d, ballast %d", charged, held)
	}
	if after := readInt(t, usage) - before; after > 4*Granule+1<<20 {
		t.Fatalf("cgroup usage still %d bytes above its start", after)
	}
}

// At the cgroup's limit with nothing the OOM killer may take, a charge
// fails with ipcns.ErrNoMemory, and the ballast gives back what it had
// started to take.
func TestChargeRefusedAtLimit(t *testing.T) {
	const limit = 32 << 20
	dir, _ := testCgroup(t, limit)
	b := newBallast(t, dir)
	var err error
	total := int64(0)
	for total < 2*limit {
		if err = b.Charge(1 << 20); err != nil {
			break
		}
		total += 1 << 20
	}
	if !errors.Is(err, ipcns.ErrNoMemory) {
		t.Fatalf("charged %d bytes into a %d-byte cgroup; last error %v", total, limit, err)
	}
	if total < limit/2 {
		t.Fatalf("refused after only %d bytes", total)
	}
	if charged, held := b.Usage(); charged != total || held > limit {
		t.Fatalf("charged %d (want %d), ballast %d", charged, total, held)
	}
	// Room again after an uncharge (all but 1 MiB: the pod's OOM killer
	// may have taken the helper, and a new one, with its own pages, must
	// fit beside the ballast).
	for i := int64(1 << 20); i < total; i += 1 << 20 {
		b.Uncharge(1 << 20)
	}
	if err := b.Charge(1 << 20); err != nil {
		t.Fatalf("charge after uncharging: %v", err)
	}
}

// A helper killed (with its container's processes) is replaced at the
// next growth; Evict stops the helper of the container named.
func TestHelperReplaced(t *testing.T) {
	dir, usage := testCgroup(t, 256<<20)
	b := newBallast(t, dir)
	if err := b.Charge(Granule); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	first := b.helper.cmd.Process
	b.mu.Unlock()
	first.Kill()
	first.Wait()
	before := readInt(t, usage)
	if err := b.Charge(8 << 20); err != nil {
		t.Fatal(err)
	}
	if grew := readInt(t, usage) - before; grew < 8<<20-2*Granule {
		t.Fatalf("usage grew by %d after the helper was replaced", grew)
	}
	b.Evict("other")
	b.mu.Lock()
	h := b.helper
	b.mu.Unlock()
	if h == nil || h.cmd.Process.Pid == first.Pid {
		t.Fatal("no new helper, or Evict of another container stopped it")
	}
	b.Evict("ctr")
	b.mu.Lock()
	h = b.helper
	b.mu.Unlock()
	if h != nil {
		t.Fatal("Evict left the helper")
	}
	// The cgroup can be removed now: the helper left it.
	if err := os.Remove(dir); err != nil {
		t.Fatalf("cgroup not removable after Evict: %v", err)
	}
}

func TestMemoryCgroupParse(t *testing.T) {
	d := t.TempDir()
	mi := filepath.Join(d, "mountinfo")
	cg := filepath.Join(d, "cgroup")
	mem := filepath.Join(d, "mem")
	uni := filepath.Join(d, "uni")
	for _, p := range []string{filepath.Join(mem, "a b", "c"), filepath.Join(uni, "x")} {
		os.MkdirAll(p, 0o755)
		os.WriteFile(filepath.Join(p, "cgroup.procs"), nil, 0o644)
	}
	os.WriteFile(mi, []byte("35 31 0:32 / "+mem+" rw - cgroup cgroup rw,memory\n41 31 0:38 / "+uni+" rw - cgroup2 cgroup2 rw\n"), 0o644)
	os.WriteFile(cg, []byte("4:memory:/a b/c\n0::/x\n"), 0o644)
	if p, err := memoryCgroup(cg, mi); err != nil || p != filepath.Join(mem, "a b", "c", "cgroup.procs") {
		t.Fatalf("v1: %q, %v", p, err)
	}
	os.WriteFile(cg, []byte("0::/x\n"), 0o644)
	if p, err := memoryCgroup(cg, mi); err != nil || p != filepath.Join(uni, "x", "cgroup.procs") {
		t.Fatalf("v2: %q, %v", p, err)
	}
	os.WriteFile(mi, []byte(`41 31 0:38 /x `+uni+`/with\040space rw - cgroup2 cgroup2 rw`+"\n"), 0o644)
	os.MkdirAll(filepath.Join(uni, "with space", "y"), 0o755)
	os.WriteFile(filepath.Join(uni, "with space", "y", "cgroup.procs"), nil, 0o644)
	os.WriteFile(cg, []byte("0::/x/y\n"), 0o644)
	if p, err := memoryCgroup(cg, mi); err != nil || p != filepath.Join(uni, "with space", "y", "cgroup.procs") {
		t.Fatalf("v2 below a mounted root: %q, %v", p, err)
	}
	// A process outside the shim's cgroup namespace: its path climbs
	// above the namespace's root, and must not be folded into the mount
	// (where "x" names another cgroup).
	os.WriteFile(mi, []byte("41 31 0:38 / "+uni+" rw - cgroup2 cgroup2 rw\n"), 0o644)
	os.WriteFile(cg, []byte("0::/../x\n"), 0o644)
	if p, err := memoryCgroup(cg, mi); err == nil {
		t.Fatalf("v2 outside the cgroup namespace: %q", p)
	}
	// A mount whose root is outside the namespace (bind-mounted from
	// the host's view).
	os.WriteFile(mi, []byte("41 31 0:38 /.. "+uni+" rw - cgroup2 cgroup2 rw\n"), 0o644)
	os.WriteFile(cg, []byte("0::/x\n"), 0o644)
	if p, err := memoryCgroup(cg, mi); err == nil {
		t.Fatalf("v2 mounted from outside the cgroup namespace: %q", p)
	}
	// The host's hierarchy bind-mounted into a cgroup namespace: the
	// mount's root and the process's path climb alike, and the path
	// below the root is in the mount.
	os.WriteFile(mi, []byte("41 31 0:38 /../.. "+uni+" rw - cgroup2 cgroup2 rw\n"), 0o644)
	os.WriteFile(cg, []byte("0::/../../x\n"), 0o644)
	if p, err := memoryCgroup(cg, mi); err != nil || p != filepath.Join(uni, "x", "cgroup.procs") {
		t.Fatalf("v2, the host's hierarchy mounted in a cgroup namespace: %q, %v", p, err)
	}
	// But a path that climbs above that mount's root is not in it.
	os.WriteFile(mi, []byte("41 31 0:38 /.. "+uni+" rw - cgroup2 cgroup2 rw\n"), 0o644)
	os.WriteFile(cg, []byte("0::/../../x\n"), 0o644)
	if p, err := memoryCgroup(cg, mi); err == nil {
		t.Fatalf("v2, above a mount from outside the cgroup namespace: %q", p)
	}
}

// A helper that does not answer (its cgroup frozen; here stopped) is
// given up after its timeout and replaced; the charge goes through.
func TestHelperStuck(t *testing.T) {
	dir, _ := testCgroup(t, 256<<20)
	b := newBallast(t, dir)
	if err := b.Charge(Granule); err != nil {
		t.Fatal(err)
	}
	// Only the helper about to be stopped gets a short timeout: its
	// replacement has helperTimeout to start and answer, as in the shim.
	b.mu.Lock()
	b.helper.timeout = 200 * time.Millisecond
	stuck := b.helper.cmd.Process
	b.mu.Unlock()
	if err := stuck.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// SIGSTOP only queues the stop: a thread of the helper that has not
	// taken it yet could still answer. Wait until all of them stopped
	// (the group stop is complete).
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, stuck.Pid, &info, unix.WSTOPPED, nil)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			t.Fatalf("wait for the helper to stop: %v", err)
		}
	}
	if err := b.Charge(4 << 20); err != nil {
		t.Fatalf("charge with a stuck helper: %v", err)
	}
	b.mu.Lock()
	h := b.helper
	b.mu.Unlock()
	if h == nil || h.cmd.Process.Pid == stuck.Pid || !b.Backed() {
		t.Fatal("the stuck helper was not replaced")
	}
}

// Helpers that never answer (here a process that only sleeps, as one in
// a frozen cgroup would) are not taken for the pod's OOM killer's last
// choice: the charge is counted, not refused, and not backed for
// retryAfter.
func TestHelperNeverAnswers(t *testing.T) {
	dir, _ := testCgroup(t, 256<<20)
	script := filepath.Join(t.TempDir(), "silent-helper")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec /bin/sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	oldExe, oldTimeout := exe, helperTimeout
	exe = func() string { return script }
	// The helpers never answer whatever the timeout: it only bounds the
	// test's duration.
	helperTimeout = 100 * time.Millisecond
	defer func() { exe, helperTimeout = oldExe, oldTimeout }()
	b := newBallast(t, dir)
	if err := b.Charge(Granule); err != nil {
		t.Fatalf("charge with helpers that never answer: %v", err)
	}
	if b.Backed() {
		t.Fatal("charges reported backed with no helper answering")
	}
	if charged, _ := b.Usage(); charged != Granule {
		t.Fatalf("charged %d, want %d", charged, Granule)
	}
}

// A helper that cannot start leaves charges counted, not backed, for
// retryAfter only: a later growth starts one and backs everything.
func TestUnbackedRetries(t *testing.T) {
	dir, usage := testCgroup(t, 256<<20)
	fail := true
	b, err := New(t.Name(), func() ([]Place, error) {
		if fail {
			return nil, errors.New("no host yet")
		}
		return []Place{{Container: "ctr", Procs: filepath.Join(dir, "cgroup.procs")}}, nil
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Charge(4 << 20); err != nil || b.Backed() {
		t.Fatalf("charge without a host: %v, backed %v", err, b.Backed())
	}
	fail = false
	b.mu.Lock()
	b.unbackedUntil = time.Now() // as if retryAfter had passed
	b.mu.Unlock()
	before := readInt(t, usage)
	if err := b.Charge(Granule); err != nil || !b.Backed() {
		t.Fatalf("charge after the retry time: %v, backed %v", err, b.Backed())
	}
	if grew := readInt(t, usage) - before; grew < 4<<20 {
		t.Fatalf("the retry backed %d bytes, not the 4 MiB charged before it", grew)
	}
}
