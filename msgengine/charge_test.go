package msgengine

import (
	"context"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// msgBytes is the charge of a message of size bytes of text held in the
// heap: its record and its text.
func msgBytes(size int64) int64 { return msgBase + size }

type capAccount struct{ used, limit int64 }

func (a *capAccount) Charge(n int64) error {
	if a.used+n > a.limit {
		return ipcns.ErrNoMemory
	}
	a.used += n
	return nil
}
func (a *capAccount) Uncharge(n int64) { a.used -= n }

// TestCharge: a queued message is charged to the namespace's account
// until it is received or its queue removed; a send the account refuses
// fails with ENOMEM first (load_msg comes before the id lookup); a
// message handed to a waiting receiver, or held by a sender whose sleep
// is cancelled, leaves nothing charged.
func TestCharge(t *testing.T) {
	e := New(ipcns.NewResources("charge", ipcns.DefaultLimits()))
	acct := &capAccount{limit: 2 * msgBytes(100)}
	if err := e.ns.SetAccount(acct); err != nil {
		t.Fatal(err)
	}
	c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(ipcns.NewPidNamespace(nil, 1), 10)}
	id, err := e.Msgget(c, ipcns.IPCPrivate, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	send := func(id int32, n int, flags int) error {
		_, err := e.StartSend(c, &SndOp{MsqID: id, Type: 1, Data: make([]byte, n), Flags: flags, Done: func(error) {}})
		return err
	}
	for i := 0; i < 2; i++ {
		if err := send(id, 100, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := send(id, 1, IPCNoWait); err != unix.ENOMEM {
		t.Fatalf("send past the account: %v, want ENOMEM", err)
	}
	if err := send(-1, 1, 0); err != unix.EINVAL {
		t.Fatalf("send to -1: %v, want EINVAL (checked before the allocation)", err)
	}
	if err := send(12345, 1, 0); err != unix.ENOMEM {
		t.Fatalf("send to a missing id past the account: %v, want ENOMEM", err)
	}
	rcv := func() {
		if _, err := e.Msgrcv(context.Background(), c, &RcvOp{MsqID: id, Size: 100}); err != nil {
			t.Fatal(err)
		}
	}
	rcv()
	if acct.used != msgBytes(100) {
		t.Fatalf("after one receive: used %d, want %d", acct.used, msgBytes(100))
	}
	rcv()
	// A receiver asleep takes the next message directly.
	got := make(chan error, 1)
	_, w, err := e.StartRecv(c, &RcvOp{MsqID: id, Size: 100, Done: func(_ Message, err error) { got <- err }})
	if err != nil || w == nil {
		t.Fatalf("StartRecv: %v %v", w, err)
	}
	if err := send(id, 10, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil || acct.used != 0 {
		t.Fatalf("pipelined: %v, used %d", err, acct.used)
	}
	// A sender asleep on a full queue holds its message's charge until
	// its sleep is cancelled.
	lim := *e.ns.Limits()
	acct.limit = 1 << 20
	for i := 0; i < lim.MsgMNB/1000; i++ {
		if err := send(id, 1000, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := acct.used
	ws, err := e.StartSend(c, &SndOp{MsqID: id, Type: 1, Data: make([]byte, 1000), Done: func(error) {}})
	if err != nil || ws == nil {
		t.Fatalf("sender did not sleep: %v %v", ws, err)
	}
	if acct.used != before+msgBytes(1000) {
		t.Fatalf("sleeping sender: used %d, want %d", acct.used, before+msgBytes(1000))
	}
	if !ws.Cancel() || acct.used != before {
		t.Fatalf("cancelled sender: used %d, want %d", acct.used, before)
	}
	if err := e.Remove(c, id); err != nil {
		t.Fatal(err)
	}
	if acct.used != 0 || e.ns.Charged() != 0 {
		t.Fatalf("after IPC_RMID: used %d, charged %d", acct.used, e.ns.Charged())
	}
}
