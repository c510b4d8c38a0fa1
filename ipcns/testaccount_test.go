package ipcns_test

import (
	"errors"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

type capped struct{ used, limit int64 }

func (a *capped) Charge(n int64) error {
	if a.used+n > a.limit {
		return ipcns.ErrNoMemory
	}
	a.used += n
	return nil
}
func (a *capped) Uncharge(n int64) { a.used -= n }

// TestSetAccount: an account set late receives what is outstanding, a
// refused charge changes nothing, and replacing the account moves the
// outstanding bytes.
func TestSetAccount(t *testing.T) {
	ns := ipcns.NewResources("t", ipcns.DefaultLimits())
	if err := ns.Charge(100); err != nil {
		t.Fatal(err)
	}
	a := &capped{limit: 150}
	if err := ns.SetAccount(a); err != nil || a.used != 100 {
		t.Fatalf("SetAccount: %v, used %d", err, a.used)
	}
	if err := ns.Charge(60); err != ipcns.ErrNoMemory || a.used != 100 || ns.Charged() != 100 {
		t.Fatalf("over the cap: %v, used %d, charged %d", err, a.used, ns.Charged())
	}
	ns.Uncharge(40)
	b := &capped{limit: 1000}
	if err := ns.SetAccount(b); err != nil || a.used != 0 || b.used != 60 {
		t.Fatalf("replaced: %v, old %d, new %d", err, a.used, b.used)
	}
}

// textStore holds up to limit bytes of texts; beyond, it refuses with
// ErrNoMemory, or sends them to the heap when heap is set.
type textStore struct {
	capped
	texts, limit int
	heap         bool
	mine         map[*byte]bool
}

var errNotHere = errors.New("not here")

func (s *textStore) AllocText(n int, _ bool) ([]byte, error) {
	if s.texts+n > s.limit {
		if s.heap {
			return nil, errNotHere
		}
		return nil, ipcns.ErrNoMemory
	}
	s.texts += n
	t := make([]byte, n)
	s.mine[&t[0]] = true
	return t, nil
}

func (s *textStore) FreeText(t []byte) bool {
	if !s.mine[&t[0]] {
		return false
	}
	delete(s.mine, &t[0])
	s.texts -= len(t)
	return true
}

// TestTexts: a text goes to the account's store, which is its charge (not
// charged again); one the store cannot take goes to the heap, charged;
// a refusal is ENOMEM; a text is given back where it came from, also
// after the account is gone.
func TestTexts(t *testing.T) {
	ns := ipcns.NewResources("t", ipcns.DefaultLimits())
	s := &textStore{capped: capped{limit: 1000}, limit: 100, mine: map[*byte]bool{}}
	if err := ns.SetAccount(s); err != nil {
		t.Fatal(err)
	}
	a, err := ns.AllocText(60)
	if err != nil || s.texts != 60 || s.used != 0 || ns.Charged() != 60 {
		t.Fatalf("in the store: %v, store %d, charged to the account %d, Charged %d", err, s.texts, s.used, ns.Charged())
	}
	if _, err := ns.AllocText(60); err != ipcns.ErrNoMemory {
		t.Fatalf("beyond the store: %v", err)
	}
	s.heap = true
	h, err := ns.AllocText(60)
	if err != nil || s.used != 60 || ns.Charged() != 120 {
		t.Fatalf("to the heap: %v, charged to the account %d, Charged %d", err, s.used, ns.Charged())
	}
	if err := ns.SetAccount(nil); err != nil || s.used != 0 {
		t.Fatalf("account removed: %v, still charged %d", err, s.used)
	}
	ns.FreeText(a)
	ns.FreeText(h)
	if s.texts != 0 || ns.Charged() != 0 {
		t.Fatalf("after freeing: store %d, Charged %d", s.texts, ns.Charged())
	}
}

// A text store cannot replace another whose texts are live: they could
// not be given back.
func TestTextStoreNotReplacedWithTextsLive(t *testing.T) {
	ns := ipcns.NewResources("t", ipcns.DefaultLimits())
	a := &textStore{capped: capped{limit: 1000}, limit: 100, mine: map[*byte]bool{}}
	b := &textStore{capped: capped{limit: 1000}, limit: 100, mine: map[*byte]bool{}}
	if err := ns.SetAccount(a); err != nil {
		t.Fatal(err)
	}
	x, err := ns.AllocText(10)
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.SetAccount(b); err != ipcns.ErrTextsLive {
		t.Fatalf("replaced with texts live: %v", err)
	}
	ns.FreeText(x)
	if err := ns.SetAccount(b); err != nil || a.texts != 0 {
		t.Fatalf("replaced once none is live: %v, old store %d", err, a.texts)
	}
}
