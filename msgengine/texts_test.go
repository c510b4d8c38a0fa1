package msgengine

import (
	"context"
	"sync"
	"testing"
	"unsafe"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// textTracker is an account that holds message texts (ipcns.TextStore)
// and checks that the engine gives each back exactly once and never uses
// one after: a freed text is overwritten with poison, so a message read
// from freed memory shows in a differential test's log.
type textTracker struct {
	mu   sync.Mutex
	live map[*byte]int
	bad  []string
}

const poison = 0xdb

func newTextTracker() *textTracker { return &textTracker{live: map[*byte]int{}} }

func (a *textTracker) Charge(int64) error { return nil }
func (a *textTracker) Uncharge(int64)     {}

func (a *textTracker) AllocText(n int, _ bool) ([]byte, error) {
	t := make([]byte, n)
	a.mu.Lock()
	a.live[unsafe.SliceData(t)] = n
	a.mu.Unlock()
	return t, nil
}

func (a *textTracker) FreeText(t []byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := unsafe.SliceData(t)
	n, ok := a.live[p]
	if !ok {
		a.bad = append(a.bad, "a text freed twice, or not the store's")
		return true
	}
	if n != len(t) {
		a.bad = append(a.bad, "a text freed with another length")
	}
	delete(a.live, p)
	for i := range unsafe.Slice(p, n) {
		unsafe.Slice(p, n)[i] = poison
	}
	return true
}

// trackTexts makes e's texts go through a textTracker.
func trackTexts(e *Engine) *textTracker {
	a := newTextTracker()
	if err := e.ns.SetAccount(a); err != nil {
		panic(err)
	}
	return a
}

// checkTexts frees every queue of e (waking its sleepers with EIDRM)
// and fails if a text is still live or was freed wrongly.
func (a *textTracker) checkTexts(t testing.TB, e *Engine) {
	t.Helper()
	e.Free()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.live) != 0 || len(a.bad) != 0 {
		t.Fatalf("texts: %d still live after every queue was freed; misuse: %q", len(a.live), a.bad)
	}
	if c := e.ns.Charged(); c != 0 {
		t.Fatalf("%d bytes still charged after every queue was freed", c)
	}
}

// After Free (the namespace dropped) a send that found the engine before
// stores nothing: EIDRM, and no text outlives the namespace.
func TestSendAfterFree(t *testing.T) {
	f := newFixture(ipcns.DefaultLimits())
	c := f.caller()
	id, err := f.e.Msgget(c, ipcns.IPCPrivate, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.e.Free()
	id2, err := f.e.Msgget(c, ipcns.IPCPrivate, 0o600) // made after Free
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []int32{id, id2} {
		err := f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: q, Type: 1, Data: []byte("late"), Flags: IPCNoWait})
		if err != unix.EINVAL && err != unix.EIDRM {
			t.Fatalf("send to %d after Free: %v", q, err)
		}
	}
	f.texts.checkTexts(t, f.e)
}
