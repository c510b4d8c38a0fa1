package task

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/memcharge"
)

// hang is a hang detector, not a timing assertion: the calls checked
// with it take microseconds, and a call blocked behind a stuck ballast
// stays blocked until the test lets the ballast go, however long.
const hang = 10 * time.Second

// stuckBallast returns a ballast whose next growth blocks, holding the
// ballast's lock (as a round trip to a helper in a frozen cgroup does):
// its helper's Host waits. entered is closed when a growth is in it;
// release lets it go (once, also at the test's end), and the growth
// then goes on unbacked.
func stuckBallast(t *testing.T) (b *memcharge.Ballast, entered <-chan struct{}, release func()) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	var inOnce, outOnce sync.Once
	b, err := memcharge.New(t.Name(), func() ([]memcharge.Place, error) {
		inOnce.Do(func() { close(in) })
		<-out
		return nil, errors.New("test: no host")
	}, nil) // nil: a growth let go at the test's end may log after it

	if err != nil {
		t.Fatal(err)
	}
	release = func() { outOnce.Do(func() { close(out) }) }
	t.Cleanup(func() {
		release()
		b.Close()
	})
	return b, in, release
}

// within runs f and reports whether it returned before hang; if not, it
// fails the test (f is left to finish when the ballast is let go).
func within(t *testing.T, what string, f func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-time.After(hang):
		t.Errorf("%s: blocked behind another namespace's stuck ballast", what)
		return false
	}
}

// waitInCall waits until some goroutine is in all of frames (each a
// substring of a function in its stack): the call under test has reached
// the stuck ballast, where it stays until the test lets it go.
func waitInCall(t *testing.T, frames ...string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(hang)
	for {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			in := true
			for _, f := range frames {
				in = in && strings.Contains(g, f)
			}
			if in {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine reached %v", frames)
		}
		time.Sleep(time.Millisecond) // polling for a state, not a delay
	}
}

// othersServed checks that namespace other and the table's control calls
// are served while one namespace's ballast is stuck: a trapped call's
// lookup (engines, as Handle), the view's (Peek), and a container of
// another pod coming and going (which take the table's lock).
func othersServed(t *testing.T, n *EngineTable, other uint64) {
	t.Helper()
	checks := []struct {
		what string
		f    func()
	}{
		{"a trapped call's lookup in another namespace", func() {
			if _, err := n.engines(other, os.Getpid()); err != nil {
				t.Error(err)
			}
		}},
		{"the view's lookup of another namespace", func() {
			if n.Peek(other) == nil {
				t.Error("Peek: namespace gone")
			}
		}},
		{"a container of another pod created", func() {
			n.Prepare("new", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
			n.Attach("new", 1<<40+300, 0)
		}},
		{"a container of another pod deleted", func() {
			n.Evict("new")
			if n.Remove("new") != 1<<40+300 {
				t.Error("Remove: namespace not freed")
			}
		}},
	}
	for _, c := range checks {
		if !within(t, c.what, c.f) {
			return
		}
	}
}

// twoPods returns a table serving container a in namespace 1<<40+100,
// whose ballast is stuck (see stuckBallast), and container b in
// 1<<40+200.
func twoPods(t *testing.T) (n *EngineTable, b *memcharge.Ballast, entered <-chan struct{}, release func()) {
	n = NewEngineTable()
	for _, c := range []struct {
		id  string
		ino uint64
	}{{"a", 1<<40 + 100}, {"b", 1<<40 + 200}} {
		n.Prepare(c.id, ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
		n.Attach(c.id, c.ino, 0)
	}
	b, entered, release = stuckBallast(t)
	n.mu.Lock()
	n.byIno[1<<40+100].ballast = b
	n.mu.Unlock()
	go b.Charge(1) // a call of pod a, its helper stuck
	<-entered
	return n, b, entered, release
}

// Evicting a container whose namespace's helper is stuck (Delete, before
// runc removes the cgroup) waits for it, but no other pod's calls and no
// other container's create or delete wait with it.
func TestEvictStuckBlocksNoOther(t *testing.T) {
	n, _, _, release := twoPods(t)
	evicted := make(chan struct{})
	go func() {
		defer close(evicted)
		n.Evict("a")
	}()
	waitInCall(t, "(*EngineTable).Evict", "memcharge.(*Ballast).Evict")
	othersServed(t, n, 1<<40+200)
	release()
	<-evicted
}

// Deleting the last container of a namespace whose helper is stuck
// waits for it, but no other pod's calls do.
func TestRemoveStuckBlocksNoOther(t *testing.T) {
	n, _, _, release := twoPods(t)
	removed := make(chan uint64)
	go func() { removed <- n.Remove("a") }()
	waitInCall(t, "(*EngineTable).Remove", "memcharge.(*Ballast)")
	othersServed(t, n, 1<<40+200)
	release()
	if ino := <-removed; ino != 1<<40+100 || n.Known(ino) {
		t.Fatalf("Remove: freed %d, still known %v", ino, n.Known(1<<40+100))
	}
}

// A namespace a process makes itself whose first charge is stuck (the
// helper of its cgroup's ballast) holds up the calls of that namespace
// only; a container attaching to it meanwhile serves it, and the one
// being made is thrown away with its share of the ballast.
func TestNestedChargeBlocksNoOther(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	procs, err := memcharge.MemoryCgroup(os.Getpid())
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	n := NewEngineTable()
	n.ChargePods = true
	n.Prepare("b", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	n.Attach("b", 1<<40+200, 0)
	b, entered, release := stuckBallast(t)
	n.mu.Lock()
	// The cgroup's shared ballast, kept by a user of the test's own.
	n.nested = map[string]*memcharge.Ballast{procs: b}
	n.nestedUsers = map[string]int{procs: 1}
	n.mu.Unlock()
	const ino = 1<<40 + 1
	type result struct {
		eng *gateway.Engines
		err error
	}
	made := make(chan result, 1)
	go func() {
		e, err := n.engines(ino, os.Getpid())
		made <- result{e, err}
	}()
	<-entered
	othersServed(t, n, 1<<40+200)
	if t.Failed() {
		return
	}
	if !within(t, "a container attaching to the namespace being made", func() {
		n.Prepare("x", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
		n.Attach("x", ino, 0)
	}) {
		return
	}
	release()
	r := <-made
	if r.err != nil || r.eng == nil || r.eng != n.Peek(ino) {
		t.Fatalf("engines: %v; not the attached container's engines", r.err)
	}
	n.mu.RLock()
	count, users := n.nestedCount, n.nestedUsers[procs]
	n.mu.RUnlock()
	if count != 0 || users != 1 {
		t.Fatalf("the namespace thrown away kept its place (%d) or its share of the ballast (%d users)", count, users)
	}
	if charged, _ := b.Usage(); charged != 0 {
		t.Fatalf("the namespace thrown away left %d bytes charged", charged)
	}
}
