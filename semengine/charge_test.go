package semengine

import (
	"context"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// capAccount refuses charges beyond limit bytes.
type capAccount struct{ used, limit int64 }

func (a *capAccount) Charge(n int64) error {
	if a.used+n > a.limit {
		return ipcns.ErrNoMemory
	}
	a.used += n
	return nil
}
func (a *capAccount) Uncharge(n int64) { a.used -= n }

// TestCharge: sets and undo entries are charged to the namespace's
// account while they exist, refused with ENOMEM when it cannot take them
// (as newary and find_alloc_undo fail), and given back exactly on
// IPC_RMID and exit.
func TestCharge(t *testing.T) {
	e, pidns := newTestEngine("charge")
	acct := &capAccount{limit: setBytes(100) + setBytes(10) + undoBytes(10)}
	if err := e.Resources().SetAccount(acct); err != nil {
		t.Fatal(err)
	}
	c := rootCaller(pidns, 10)
	big, err := e.Semget(c, ipcns.IPCPrivate, 100, 0o600)
	if err != nil || acct.used != setBytes(100) {
		t.Fatalf("semget: %v, used %d", err, acct.used)
	}
	small, err := e.Semget(c, ipcns.IPCPrivate, 10, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Semget(c, ipcns.IPCPrivate, 1, 0o600); err != unix.ENOMEM {
		t.Fatalf("semget past the account: %v, want ENOMEM", err)
	}
	// An undo entry for the big set does not fit: the semop fails with
	// ENOMEM and changes nothing.
	up := func(id int32) error {
		return e.Semop(context.Background(), c, &Op{SemID: id, Sops: []Sembuf{{Num: 0, Op: 1, Flg: SemUndo}}})
	}
	if err := up(big); err != unix.ENOMEM {
		t.Fatalf("semop SEM_UNDO past the account: %v, want ENOMEM", err)
	}
	if v := mustGet(t, e, c, big, 0, GetVal); v != 0 {
		t.Fatalf("value after ENOMEM: %d", v)
	}
	if err := up(small); err != nil {
		t.Fatal(err)
	}
	want := setBytes(100) + setBytes(10) + undoBytes(10)
	if acct.used != want || e.Resources().Charged() != want {
		t.Fatalf("used %d, charged %d, want %d", acct.used, e.Resources().Charged(), want)
	}
	e.Exit(c.Pid)
	if err := e.Remove(c, big); err != nil {
		t.Fatal(err)
	}
	// An undo entry dropped by IPC_RMID rather than exit.
	c2 := rootCaller(pidns, 11)
	if err := e.Semop(context.Background(), c2, &Op{SemID: small, Sops: []Sembuf{{Num: 0, Op: 1, Flg: SemUndo}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(c, small); err != nil {
		t.Fatal(err)
	}
	e.Exit(c2.Pid)
	if acct.used != 0 || e.Resources().Charged() != 0 {
		t.Fatalf("after removal and exits: used %d, charged %d", acct.used, e.Resources().Charged())
	}
	// A set refused for SEMMNI (ENOSPC after newary's allocation) leaves
	// no charge behind.
	lim := *e.Resources().Limits()
	lim.SemMNI = 0
	e.Resources().SetLimits(lim)
	if _, err := e.Semget(c, ipcns.IPCPrivate, 1, 0o600); err != unix.ENOSPC || acct.used != 0 {
		t.Fatalf("semget with semmni 0: %v, used %d", err, acct.used)
	}
}
