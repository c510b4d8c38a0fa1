package semengine

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// Engine-only tests: what the kernel has no counterpart for (Commit,
// several namespaces in one process) and concurrency under the race
// detector.

func newTestEngine(name string) (*Engine, *ipcns.PidNamespace) {
	return New(ipcns.NewResources(name, ipcns.DefaultLimits())), ipcns.NewPidNamespace(nil, 1)
}

func rootCaller(ns *ipcns.PidNamespace, pid int32) *ipcns.Caller {
	return &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(ns, pid)}
}

func mustGet(t *testing.T, e *Engine, c *ipcns.Caller, id int32, num, cmd int) int {
	t.Helper()
	v, err := e.Get(c, id, num, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitQueued waits until n semops sleep in e.
func waitQueued(t *testing.T, e *Engine, n int) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		if len(e.Waiters()) == n {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatalf("never saw %d waiters", n)
}

func TestCommitFailedRollsBackImmediateOp(t *testing.T) {
	e, root := newTestEngine("t")
	a, b := rootCaller(root, 10), rootCaller(root, 11)
	id, _ := e.Semget(a, ipcns.IPCPrivate, 2, 0o600)
	if err := e.SetVal(a, id, 0, 3); err != nil {
		t.Fatal(err)
	}
	err := e.Semop(context.Background(), b, &Op{SemID: id,
		Sops:   []Sembuf{{Num: 0, Op: -2, Flg: SemUndo}, {Num: 1, Op: 5, Flg: SemUndo}},
		Commit: func() bool { return false }})
	if !errors.Is(err, ErrNotDelivered) {
		t.Fatalf("got %v, want ErrNotDelivered", err)
	}
	if v := mustGet(t, e, a, id, 0, GetVal); v != 3 {
		t.Errorf("semval 0 = %d, want 3 (rolled back)", v)
	}
	if v := mustGet(t, e, a, id, 1, GetVal); v != 0 {
		t.Errorf("semval 1 = %d, want 0", v)
	}
	if p := mustGet(t, e, a, id, 0, GetPID); p != 10 {
		t.Errorf("sempid = %d, want 10 (the last op that was delivered)", p)
	}
	ds, _, _ := e.Stat(a, id, IPCStat)
	if ds.Otime != 0 {
		t.Errorf("otime set by an operation that never happened")
	}
	// The adjustments were rolled back too: exit changes nothing.
	e.Exit(b.Pid)
	if v := mustGet(t, e, a, id, 0, GetVal); v != 3 {
		t.Errorf("after exit semval 0 = %d, want 3", v)
	}
}

func TestCommitFailedSleeperPassesTheUnitOn(t *testing.T) {
	e, root := newTestEngine("t")
	main, gone, next := rootCaller(root, 1), rootCaller(root, 2), rootCaller(root, 3)
	id, _ := e.Semget(main, ipcns.IPCPrivate, 1, 0o600)
	goneErr, nextErr := make(chan error, 1), make(chan error, 1)
	go func() {
		goneErr <- e.Semop(context.Background(), gone, &Op{SemID: id, Sops: []Sembuf{{Op: -1, Flg: SemUndo}}, Commit: func() bool { return false }})
	}()
	waitQueued(t, e, 1)
	delivered := false
	go func() {
		nextErr <- e.Semop(context.Background(), next, &Op{SemID: id, Sops: []Sembuf{{Op: -1}}, Commit: func() bool { delivered = true; return true }})
	}()
	waitQueued(t, e, 2)
	if err := e.Semop(context.Background(), main, &Op{SemID: id, Sops: []Sembuf{{Op: 1}}}); err != nil {
		t.Fatal(err)
	}
	got := []error{<-goneErr, <-nextErr}
	if !(errors.Is(got[0], ErrNotDelivered) && got[1] == nil) {
		t.Fatalf("results %v, want [ErrNotDelivered <nil>]", got)
	}
	if !delivered {
		t.Error("second sleeper's Commit not called")
	}
	if v := mustGet(t, e, main, id, 0, GetVal); v != 0 {
		t.Errorf("semval = %d, want 0", v)
	}
	if p := mustGet(t, e, main, id, 0, GetPID); p != 3 {
		t.Errorf("sempid = %d, want 3", p)
	}
	e.Exit(gone.Pid) // its rolled-back adjustment must not be applied
	if v := mustGet(t, e, main, id, 0, GetVal); v != 0 {
		t.Errorf("after exit semval = %d, want 0", v)
	}
}

// TestUndoScopedToNamespace: the same process, the same semid in two
// namespaces; exiting applies each namespace's own entries only.
func TestUndoScopedToNamespace(t *testing.T) {
	a, root := newTestEngine("a")
	b := New(ipcns.NewResources("b", ipcns.DefaultLimits()))
	p := rootCaller(root, 42)
	ida, _ := a.Semget(p, ipcns.IPCPrivate, 1, 0o600)
	idb, _ := b.Semget(p, ipcns.IPCPrivate, 1, 0o600)
	if ida != idb {
		t.Fatalf("ids differ: %d %d", ida, idb)
	}
	if err := a.Semop(context.Background(), p, &Op{SemID: ida, Sops: []Sembuf{{Op: 5, Flg: SemUndo}}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Semop(context.Background(), p, &Op{SemID: idb, Sops: []Sembuf{{Op: 2}}}); err != nil {
		t.Fatal(err)
	}
	a.Exit(p.Pid)
	if v := mustGet(t, a, p, ida, 0, GetVal); v != 0 {
		t.Errorf("ns a: %d, want 0", v)
	}
	if v := mustGet(t, b, p, idb, 0, GetVal); v != 2 {
		t.Errorf("ns b: %d, want 2 (untouched)", v)
	}
	b.Exit(p.Pid)
	if v := mustGet(t, b, p, idb, 0, GetVal); v != 2 {
		t.Errorf("ns b after its exit: %d, want 2", v)
	}
}

// TestCancelNeverLosesAUnit races cancellation against wakeups: every
// unit posted is either taken by exactly one sleeper or still there.
func TestCancelNeverLosesAUnit(t *testing.T) {
	e, root := newTestEngine("t")
	main := rootCaller(root, 1)
	id, _ := e.Semget(main, ipcns.IPCPrivate, 1, 0o600)
	rounds := 2000
	if testing.Short() {
		rounds = 300
	}
	taken := 0
	for i := 0; i < rounds; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		if i%2 == 0 {
			// Let the sleeper sleep before the post: drain the unit an
			// earlier cancelled sleeper left.
			if e.Semop(context.Background(), main, &Op{SemID: id, Sops: []Sembuf{{Op: -1, Flg: IPCNoWait}}}) == nil {
				taken++
			}
		}
		go func() { res <- e.Semop(ctx, rootCaller(root, 2), &Op{SemID: id, Sops: []Sembuf{{Op: -1}}}) }()
		if i%2 == 0 {
			waitQueued(t, e, 1)
		}
		go cancel()
		if err := e.Semop(context.Background(), main, &Op{SemID: id, Sops: []Sembuf{{Op: 1}}}); err != nil {
			t.Fatal(err)
		}
		switch err := <-res; err {
		case nil:
			taken++
		case unix.EINTR:
		default:
			t.Fatalf("sleeper: %v", err)
		}
		cancel()
	}
	if v := mustGet(t, e, main, id, 0, GetVal); v+taken != rounds {
		t.Fatalf("value %d + taken %d != posted %d", v, taken, rounds)
	}
	t.Logf("%d of %d units taken by sleepers before their cancellation", taken, rounds)
}

// TestConcurrentMixedOps runs simple and complex operations from many
// goroutines, moving the set between per-semaphore and whole-set locking,
// and checks that no unit is lost or made. Random walkers move units among
// semaphores 0-3 (kept far from 0 so they never sleep); ping-pong pairs
// hand one unit back and forth on semaphores 4-7, sleeping and waking each
// other through simple and complex operations.
func TestConcurrentMixedOps(t *testing.T) {
	e, root := newTestEngine("t")
	main := rootCaller(root, 1)
	const walkers, start = 4, 10000
	id, _ := e.Semget(main, ipcns.IPCPrivate, 8, 0o600)
	if err := e.SetAll(main, id, func(int) ([]uint16, error) {
		return []uint16{start, start, start, start, 1, 0, 1, 0}, nil
	}); err != nil {
		t.Fatal(err)
	}
	iters := 4000
	if testing.Short() {
		iters = 600
	}
	semop := func(c *ipcns.Caller, sops ...Sembuf) bool {
		if err := e.Semop(context.Background(), c, &Op{SemID: id, Sops: sops}); err != nil {
			t.Error(err)
			return false
		}
		return true
	}
	var wg sync.WaitGroup
	for w := 0; w < walkers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := rootCaller(root, int32(100+w))
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < iters; i++ {
				from, to := uint16(r.IntN(4)), uint16(r.IntN(4))
				ok := true
				switch r.IntN(3) {
				case 0: // a complex op moving a unit atomically
					ok = semop(c, Sembuf{Num: from, Op: -1}, Sembuf{Num: to, Op: 1})
				case 1: // simple ops, with an undo that cancels out
					ok = semop(c, Sembuf{Num: from, Op: -1}) &&
						semop(c, Sembuf{Num: to, Op: 1, Flg: SemUndo}) &&
						semop(c, Sembuf{Num: to, Op: -1, Flg: SemUndo}) &&
						semop(c, Sembuf{Num: to, Op: 1})
				default: // a read, which takes the whole-set lock
					_, err := e.Get(c, id, int(from), GetNCnt)
					ok = err == nil
				}
				if !ok {
					return
				}
			}
			e.Exit(c.Pid)
		}(w)
	}
	for p := 0; p < 2; p++ {
		a, b := uint16(4+2*p), uint16(5+2*p)
		for side := 0; side < 2; side++ {
			wg.Add(1)
			go func(mine, theirs uint16, complexOps bool) {
				defer wg.Done()
				c := rootCaller(root, int32(200+mine))
				for i := 0; i < iters; i++ {
					var ok bool
					if complexOps && i%2 == 0 {
						ok = semop(c, Sembuf{Num: mine, Op: -1}, Sembuf{Num: theirs, Op: 1})
					} else {
						ok = semop(c, Sembuf{Num: mine, Op: -1}) && semop(c, Sembuf{Num: theirs, Op: 1})
					}
					if !ok {
						return
					}
				}
			}([]uint16{a, b}[side], []uint16{b, a}[side], p == 1)
		}
	}
	wg.Wait()
	vals, err := e.GetAll(main, id)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, v := range vals[:4] {
		sum += int(v)
	}
	if sum != 4*start || vals[4]+vals[5] != 1 || vals[6]+vals[7] != 1 {
		t.Fatalf("units lost or made: %v", vals)
	}
	if n := len(e.Waiters()); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

func TestSetValWithinLimits(t *testing.T) {
	ns := ipcns.NewResources("t", ipcns.DefaultLimits())
	lim := *ns.Limits()
	if err := lim.SetSem("4 6 2 2"); err != nil {
		t.Fatal(err)
	}
	ns.SetLimits(lim)
	e := New(ns)
	c := rootCaller(ipcns.NewPidNamespace(nil, 1), 1)
	if _, err := e.Semget(c, ipcns.IPCPrivate, 5, 0o600); err != unix.EINVAL {
		t.Errorf("nsems above semmsl: %v", err)
	}
	id, err := e.Semget(c, ipcns.IPCPrivate, 4, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Semget(c, ipcns.IPCPrivate, 3, 0o600); err != unix.ENOSPC {
		t.Errorf("above semmns: %v", err)
	}
	if _, err := e.Semget(c, ipcns.IPCPrivate, 2, 0o600); err != nil {
		t.Errorf("within semmns: %v", err)
	}
	if _, err := e.Semget(c, ipcns.IPCPrivate, 0, 0o600); err != unix.EINVAL {
		t.Errorf("nsems 0: %v", err)
	}
	if err := e.Semop(context.Background(), c, &Op{SemID: id, Sops: make([]Sembuf, 3)}); err != unix.E2BIG {
		t.Errorf("above semopm: %v", err)
	}
	if err := lim.SetSem("1 2 3"); err == nil {
		t.Error("SetSem accepted 3 fields")
	}
}
