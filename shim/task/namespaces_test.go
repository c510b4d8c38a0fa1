package task

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/msgengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/memcharge"
)

// TestMain runs a ballast's helper when the test binary is started as one
// (ChargePods tests).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == memcharge.HelperArg {
		os.Exit(memcharge.HelperMain())
	}
	os.Exit(m.Run())
}

// Namespaces not a container's are bounded: at MaxNested the ones no
// process is in are freed, the ones in use stay.
func TestNestedBounded(t *testing.T) {
	n := NewEngineTable()
	mine, err := gateway.IPCNamespace(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.engines(mine, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	// Inodes no process is in (nsfs inodes are small numbers near
	// 0xF0000000; these are far from any).
	for i := 0; i < 3*MaxNested; i++ {
		if _, err := n.engines(uint64(1<<40+i), os.Getpid()); err != nil {
			t.Fatalf("namespace %d: %v", i, err)
		}
		if n.nestedCount > MaxNested {
			t.Fatalf("%d namespaces, bound %d", n.nestedCount, MaxNested)
		}
	}
	if !n.Known(mine) {
		t.Fatal("the sweep freed a namespace a process is in")
	}
	if n.Known(1 << 40) {
		t.Fatal("the sweep left a namespace nobody is in")
	}
}

// One record per container: what Create records (listener options, CRI
// identity) and what the listeners add (pid namespaces) go with Remove.
func TestContainerRecord(t *testing.T) {
	n := NewEngineTable()
	opts := gateway.ListenerOptions{NSFixed: true, IDsFixed: true}
	n.Prepare("sb", ipcDefault(), opts, ctrMeta{sandbox: true})
	n.Prepare("c1", ipcDefault(), gateway.ListenerOptions{NSFixed: true}, ctrMeta{name: "c1"})
	n.Attach("sb", 7, 100)
	n.Attach("c1", 7, 200)
	n.NoteProcess("sb", 100, 55)
	n.NoteProcess("c1", 200, 55) // a shared pid namespace: the sandbox's
	n.NoteProcess("c1", 300, 66) // an exec in a pid namespace of its own
	if got := n.ListenerOptions("sb"); got != opts {
		t.Fatalf("options %+v", got)
	}
	if !n.Local("c1") || n.Local("nosuch") {
		t.Fatal("Local")
	}
	metas, owner := n.containerMetas()
	if metas["sb"].initPid != 100 || !metas["sb"].sandbox || metas["c1"].initPid != 200 || metas["c1"].pidns != 55 {
		t.Fatalf("metas %+v", metas)
	}
	if owner[55] != "sb" || owner[66] != "c1" {
		t.Fatalf("pid namespace owners %v", owner)
	}
	if n.Remove("c1") != 0 {
		t.Fatal("the namespace went with a container while the sandbox is in it")
	}
	if n.ListenerOptions("c1") != (gateway.ListenerOptions{}) || n.Local("c1") {
		t.Fatal("record kept after Remove")
	}
	if _, owner = n.containerMetas(); owner[66] != "" {
		t.Fatal("a removed container's pid namespace still attributed")
	}
	if n.Remove("sb") != 7 || n.Len() != 0 {
		t.Fatal("the namespace outlived its last container")
	}
}

// A namespace made by a process and later joined by a container is
// freed with that container, and counted out of MaxNested; a removed
// container is no ballast host any more.
func TestNestedThenAttached(t *testing.T) {
	n := NewEngineTable()
	const ino = 1<<40 + 7
	if _, err := n.engines(ino, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	n.Prepare("c", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	n.Attach("c", ino, 0)
	if n.nestedCount != 1 {
		t.Fatalf("nested %d", n.nestedCount)
	}
	if n.Remove("c") != ino || n.nestedCount != 0 || n.Known(ino) {
		t.Fatalf("after Remove: nested %d, known %v", n.nestedCount, n.Known(ino))
	}
	// A container whose create failed leaves no host behind.
	n.Prepare("d", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	n.Prepare("e", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	n.Attach("d", 9, 0)
	n.Attach("e", 9, 0)
	e := n.byIno[9]
	e.addHost("d", "/x/d/cgroup.procs", 0)
	e.addHost("e", "/x/e/cgroup.procs", 42)
	// Every container is a place for the helper, earliest first: the
	// first that takes it gets it (memcharge.settle).
	if places, _ := e.host(); len(places) != 2 || places[0].Container != "d" || places[1] != (memcharge.Place{Container: "e", Procs: "/x/e/cgroup.procs", Pid: 42}) {
		t.Fatalf("hosts %v", places)
	}
	n.Remove("d")
	if places, _ := e.host(); len(places) != 1 || places[0].Container != "e" {
		t.Fatalf("hosts %v after d was removed", places)
	}
}

// A cgroup's shared ballast for the namespaces its processes make lives
// only while one of them does.
func TestNestedBallastRetired(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	n := NewEngineTable()
	n.ChargePods = true
	for i := uint64(0); i < 3; i++ {
		if _, err := n.engines(1<<40+i, os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if len(n.nested) != 1 {
		t.Skipf("%d nested ballasts (no memory cgroup here?)", len(n.nested))
	}
	for i := uint64(0); i < 3; i++ {
		if len(n.nested) != 1 {
			t.Fatalf("ballast retired with %d namespaces left", 3-i)
		}
		var d deferred
		n.mu.Lock()
		n.freeLocked(1<<40+i, n.byIno[1<<40+i], &d)
		n.publishLocked()
		n.mu.Unlock()
		d.run()
	}
	if len(n.nested) != 0 || len(n.nestedUsers) != 0 {
		t.Fatalf("ballast kept with no namespace: %d, %v", len(n.nested), n.nestedUsers)
	}
}

// The sweep reads /proc with the table unlocked: meanwhile namespaces
// are served, and one that a container attaches to, or that is made,
// is not freed by it.
func TestSweepUnlocked(t *testing.T) {
	n := NewEngineTable()
	n.Prepare("b", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	n.Attach("b", 1<<40+200, 0)
	const idle, joined = 1<<40 + 1, 1<<40 + 2
	for _, ino := range []uint64{idle, joined} {
		if _, err := n.engines(ino, os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	sweepRead = func() {
		sweepRead = nil
		if _, err := n.engines(1<<40+200, os.Getpid()); err != nil {
			t.Error(err)
		}
		n.Prepare("c", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
		n.Attach("c", joined, 0)
		// Made meanwhile (with no sweep due: this is the sweep's
		// goroutine, and a sweep is one at a time).
		n.mu.Lock()
		n.nextSweep = MaxNested
		n.mu.Unlock()
		if _, err := n.engines(1<<40+3, os.Getpid()); err != nil {
			t.Error(err)
		}
	}
	defer func() { sweepRead = nil }()
	n.mu.Lock()
	n.nextSweep = n.nestedCount // a sweep is due
	n.mu.Unlock()
	if _, err := n.engines(1<<40+4, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if sweepRead != nil {
		t.Fatal("no sweep")
	}
	if n.Known(idle) || !n.Known(joined) || !n.Known(1<<40+3) || !n.Known(1<<40+4) {
		t.Fatalf("after the sweep: idle %v, joined %v, made meanwhile %v, made after %v (want false, true, true, true)",
			n.Known(idle), n.Known(joined), n.Known(1<<40+3), n.Known(1<<40+4))
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.nestedCount != 3 {
		t.Fatalf("%d namespaces not a container's counted, 3 live", n.nestedCount)
	}
}

// A namespace not a container's that is freed gives back what its queues
// held of its cgroup's shared ballast at once (free_ipcs), text included,
// while the ballast lives on for the others.
func TestNestedFreedGivesTextBack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	n := NewEngineTable()
	n.ChargePods = true
	var engs []*gateway.Engines
	for i := uint64(0); i < 2; i++ {
		e, err := n.engines(1<<40+i, os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		engs = append(engs, e)
	}
	if len(n.nested) != 1 {
		t.Skipf("%d nested ballasts (no memory cgroup here?)", len(n.nested))
	}
	var b *memcharge.Ballast
	for _, x := range n.nested {
		b = x
	}
	charged0, base := b.Usage() // the two namespaces' own charge
	c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(ipcns.NewPidNamespace(nil, 1), 10)}
	m := engs[0].Msg()
	for i := 0; i < 50; i++ { // two texts fill a queue (msgmnb 16384)
		id, err := m.Msgget(c, ipcns.IPCPrivate, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 2; j++ {
			op := &msgengine.SndOp{MsqID: id, Type: 1, Data: make([]byte, 8192), Flags: msgengine.IPCNoWait}
			if err := m.Msgsnd(context.Background(), c, op); err != nil {
				t.Fatal(err)
			}
		}
	}
	if charged, held := b.Usage(); charged < 100*8192 || held < base+100*8192 {
		t.Fatalf("100 queued texts of 8 KiB: charged %d, held %d", charged, held)
	}
	var d deferred
	n.mu.Lock()
	n.freeLocked(1<<40, n.byIno[1<<40], &d)
	n.publishLocked()
	n.mu.Unlock()
	d.run()
	if charged, held := b.Usage(); charged >= charged0 || held > base+4*memcharge.Granule {
		t.Fatalf("after the namespace was freed: charged %d (%d before its queues), held %d (%d before)", charged, charged0, held, base)
	}
}

// A container's delete evicts the helpers of the namespaces made in its
// cgroup and in the cgroups it made below it (a service of systemd run as
// the container's init, with PrivateIPC=), not those of a neighbour whose
// name starts alike or of the pod's cgroup.
func TestNestedInContainerCgroup(t *testing.T) {
	n := NewEngineTable()
	n.nested = map[string]*memcharge.Ballast{}
	keys := []string{
		"/cg/pod/c/cgroup.procs",
		"/cg/pod/c/system.slice/foo.service/cgroup.procs",
		"/cg/pod/cd/cgroup.procs",
		"/cg/pod/cgroup.procs",
	}
	for _, k := range keys {
		b, err := memcharge.New("nested", func() ([]memcharge.Place, error) { return nil, errors.New("test: no place") }, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		n.nested[k] = b
	}
	got := n.nestedInLocked("/cg/pod/c/cgroup.procs")
	if len(got) != 2 || !slices.Contains(got, n.nested[keys[0]]) || !slices.Contains(got, n.nested[keys[1]]) {
		t.Fatalf("%d ballasts in c's cgroup, want c's and its service's", len(got))
	}
	if got := n.nestedInLocked(""); len(got) != 0 {
		t.Fatalf("%d ballasts for a container without a cgroup", len(got))
	}
}

// A paused container's helper is let go once its cgroup reads frozen (v2:
// it would be frozen with it), and the container stays a place for the
// next helper; a cgroup that does not read frozen (v1) keeps its helper.
func TestPausedEvictsFrozenHelper(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "pod", "a")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(cg, "cgroup.procs")
	os.WriteFile(procs, nil, 0o644)
	os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte("0\n"), 0o644)
	n := NewEngineTable()
	n.ChargePods = true
	n.Prepare("a", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	n.Attach("a", 1<<40+300, 0)
	n.mu.Lock()
	n.ctrs["a"].cgroup = procs
	e := n.byIno[1<<40+300]
	n.mu.Unlock()
	if e == nil || e.ballast == nil {
		t.Skip("no ballast (memfd_create refused?)")
	}
	e.addHost("a", procs, 0)
	t.Cleanup(func() { n.Remove("a") })
	helperPid := func() int {
		b, _ := os.ReadFile(procs)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid
	}
	if err := e.ballast.Charge(1); err != nil || !e.ballast.Backed() {
		t.Fatalf("charge: %v, backed %v", err, e.ballast.Backed())
	}
	pid := helperPid()
	if pid == 0 {
		t.Fatal("no helper written into the container's cgroup")
	}
	alive := func(pid int) bool { return unix.Kill(pid, 0) == nil }
	n.Paused("a") // not frozen: a v1 cgroup, or a pause that failed
	if !alive(pid) {
		t.Fatal("helper let go from a cgroup that is not frozen")
	}
	os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte("1\n"), 0o644)
	n.Paused("a")
	if alive(pid) {
		t.Fatalf("helper %d still there after the pause", pid)
	}
	if places, _ := e.host(); len(places) != 1 || places[0].Container != "a" {
		t.Fatalf("hosts after the pause: %v", places)
	}
	// Resumed: the next growth puts a helper there again.
	os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte("0\n"), 0o644)
	os.WriteFile(procs, nil, 0o644)
	if err := e.ballast.Charge(4 * memcharge.Granule); err != nil || !e.ballast.Backed() {
		t.Fatalf("charge after resume: %v, backed %v", err, e.ballast.Backed())
	}
	if p := helperPid(); p == 0 || p == pid {
		t.Fatalf("helper after resume: %d (was %d)", p, pid)
	}
}

// Evict, Paused (once frozen) and Remove stop the helpers of the
// namespaces made in the cgroups below the container's (runc removes
// the subtree with it), not those of a neighbour whose name starts
// alike: each call site, not only nestedInLocked, is checked.
func TestNestedBelowEvicted(t *testing.T) {
	root := t.TempDir()
	procsOf := func(d string) string {
		dir := filepath.Join(root, d)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "cgroup.procs")
		os.WriteFile(p, nil, 0o644)
		os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0\n"), 0o644)
		return p
	}
	cProcs := procsOf("pod/c")
	below, neighbour := procsOf("pod/c/system.slice/foo.service"), procsOf("pod/cd")
	for _, step := range []string{"evict", "paused", "remove"} {
		t.Run(step, func(t *testing.T) {
			n := NewEngineTable()
			n.Prepare("c", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
			n.Attach("c", 1<<40+301, 0)
			n.mu.Lock()
			n.ctrs["c"].cgroup = cProcs
			n.nested = map[string]*memcharge.Ballast{}
			n.mu.Unlock()
			helper := map[string]int{}
			for _, p := range []string{below, neighbour} {
				os.WriteFile(p, nil, 0o644)
				b, err := memcharge.New("nested", func() ([]memcharge.Place, error) { return []memcharge.Place{{Procs: p}}, nil }, t.Logf)
				if err != nil {
					t.Skip(err)
				}
				t.Cleanup(func() { b.Close() })
				if err := b.Charge(1); err != nil || !b.Backed() {
					t.Fatalf("charge: %v, backed %v", err, b.Backed())
				}
				data, _ := os.ReadFile(p)
				pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
				if pid == 0 {
					t.Fatalf("no helper written into %s", p)
				}
				helper[p] = pid
				n.mu.Lock()
				n.nested[p] = b
				n.mu.Unlock()
			}
			switch step {
			case "evict":
				n.Evict("c")
			case "paused":
				os.WriteFile(filepath.Join(filepath.Dir(cProcs), "cgroup.freeze"), []byte("1\n"), 0o644)
				defer os.WriteFile(filepath.Join(filepath.Dir(cProcs), "cgroup.freeze"), []byte("0\n"), 0o644)
				n.Paused("c")
			case "remove":
				n.Remove("c")
			}
			alive := func(pid int) bool { return unix.Kill(pid, 0) == nil }
			if alive(helper[below]) {
				t.Errorf("%s: the helper in a cgroup below the container's is still there", step)
			}
			if !alive(helper[neighbour]) {
				t.Errorf("%s: the helper in a neighbour's cgroup was stopped", step)
			}
		})
	}
}
