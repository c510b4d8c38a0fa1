package msgengine

import (
	"context"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

func TestIntrospect(t *testing.T) {
	lim := ipcns.DefaultLimits()
	lim.MsgMNB = 64
	f := newFixture(lim)
	a, b, c := f.caller(), f.caller(), f.caller()
	id, err := f.e.Msgget(a, 0x66, ipcns.IPCCreat|0o600)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := f.e.Msgsnd(context.Background(), a, &SndOp{MsqID: id, Type: 1, Data: make([]byte, 20)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	before := time.Now()
	// b's 10 bytes do not fit (60 of 64 used); c waits for type 7.
	go func() {
		done <- f.e.Msgsnd(ctx, b, &SndOp{MsqID: id, Type: 5, Data: make([]byte, 10)})
	}()
	f.waitSleeping(t, b)
	go func() {
		_, err := f.e.Msgrcv(ctx, c, &RcvOp{MsqID: id, Size: 100, Type: 7})
		done <- err
	}()
	f.waitSleeping(t, c)

	qs := f.e.Queues()
	if len(qs) != 1 {
		t.Fatalf("%d queues", len(qs))
	}
	q := qs[0]
	if q.ID != id || q.Perm.Key != 0x66 || q.Qnum != 3 || q.Cbytes != 60 || q.Qbytes != 64 || q.Senders != 1 || q.Receivers != 1 ||
		q.Lspid.In(f.pidns) != a.Pid.In(f.pidns) || q.Lrpid != nil || q.Reserved < 60 {
		t.Fatalf("queue %+v", q)
	}
	ws := f.e.Waiters()
	if len(ws) != 2 {
		t.Fatalf("waiters %+v", ws)
	}
	if w := ws[0]; !w.Send || w.Pid != b.Pid || w.Type != 5 || w.Size != 10 || w.Since.Before(before) || w.Mode != "" {
		t.Fatalf("sender %+v", w)
	}
	if w := ws[1]; w.Send || w.Pid != c.Pid || w.Type != 7 || w.Size != 100 || w.Mode != "equal" || w.Thread != nil || w.Since.IsZero() {
		t.Fatalf("receiver %+v", w)
	}
	if sm := f.e.Summary(); sm.Queues != 1 || sm.Messages != 3 || sm.Bytes != 60 || sm.Reserved < 60 || sm.Senders != 1 || sm.Receivers != 1 {
		t.Fatalf("summary %+v", sm)
	}
	if w1, n := f.e.WaitersN(1); n != 2 || len(w1) != 1 || !w1[0].Send {
		t.Fatalf("waiters capped at 1: %+v of %d", w1, n)
	}
	if q0, n := f.e.QueuesN(0, 0); n != 1 || len(q0) != 0 {
		t.Fatalf("queues capped at 0: %+v of %d", q0, n)
	}
	if n, msgs, bytes, res := f.e.Usage(); n != 1 || msgs != 3 || bytes != 60 || res < 60 {
		t.Fatalf("usage %d %d %d %d", n, msgs, bytes, res)
	}
	cancel()
	<-done
	<-done
	if ws := f.e.Waiters(); len(ws) != 0 {
		t.Fatalf("waiters after cancel: %+v", ws)
	}
}
