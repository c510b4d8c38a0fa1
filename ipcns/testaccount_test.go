package ipcns_test

import (
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
