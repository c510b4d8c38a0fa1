package semengine

import (
	"context"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

func TestIntrospect(t *testing.T) {
	e, root := newTestEngine("t")
	a, b, c := rootCaller(root, 10), rootCaller(root, 11), rootCaller(root, 12)
	id, err := e.Semget(a, 0x55, 3, ipcns.IPCCreat|0o640)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetVal(a, id, 1, 4); err != nil {
		t.Fatal(err)
	}
	// b takes 2 from sem 1 with SEM_UNDO; c sleeps on sem 0 (a complex
	// operation blocked on its second sembuf) and another waits for sem 1
	// to be zero.
	if err := e.Semop(context.Background(), b, &Op{SemID: id, Sops: []Sembuf{{Num: 1, Op: -2, Flg: SemUndo}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() {
		done <- e.Semop(ctx, c, &Op{SemID: id, Sops: []Sembuf{{Num: 1, Op: -1}, {Num: 0, Op: -1}}})
	}()
	waitQueued(t, e, 1)
	go func() { done <- e.Semop(ctx, a, &Op{SemID: id, Sops: []Sembuf{{Num: 1, Op: 0}}}) }()
	waitQueued(t, e, 2)

	sets := e.Sets()
	if len(sets) != 1 {
		t.Fatalf("%d sets", len(sets))
	}
	s := sets[0]
	if s.ID != id || s.Perm.Key != 0x55 || s.Perm.Mode&0o777 != 0o640 || len(s.Sems) != 3 || s.Undos != 1 {
		t.Fatalf("set %+v", s)
	}
	if s.Sems[1].Val != 2 || s.Sems[1].Pid.In(root) != 11 || s.Sems[0].Ncnt != 1 || s.Sems[1].Zcnt != 1 || s.Sems[1].Ncnt != 0 {
		t.Fatalf("sems %+v", s.Sems)
	}
	for i, sm := range s.Sems {
		if ncnt, _ := e.Get(a, id, i, GetNCnt); ncnt != sm.Ncnt {
			t.Fatalf("sem %d: ncnt %d, GETNCNT %d", i, sm.Ncnt, ncnt)
		}
		if zcnt, _ := e.Get(a, id, i, GetZCnt); zcnt != sm.Zcnt {
			t.Fatalf("sem %d: zcnt %d, GETZCNT %d", i, sm.Zcnt, zcnt)
		}
	}
	ws := e.Waiters()
	if len(ws) != 2 || ws[0].Pid.In(root) != 12 || ws[0].Blocking != 1 || ws[0].Since.IsZero() {
		t.Fatalf("waiters %+v", ws)
	}
	un := e.Undos()
	if len(un) != 1 || un[0].SemID != id || un[0].Pid.In(root) != 11 || len(un[0].Adj) != 3 || un[0].Adj[1] != 2 {
		t.Fatalf("undos %+v", un)
	}
	if sets, sems := e.Usage(); sets != 1 || sems != 3 {
		t.Fatalf("usage %d %d", sets, sems)
	}
	// The bounded reads agree with the full ones.
	if sm := e.Summary(); sm != (Summary{Sets: 1, Sems: 3, Waiters: 2, UndoEntries: 1}) {
		t.Fatalf("summary %+v", sm)
	}
	hs, total := e.SetHeaders(0, 10)
	if total != 1 || len(hs) != 1 || hs[0].ID != id || hs[0].Nsems != 3 || hs[0].Waiters != 2 || hs[0].Undos != 1 ||
		hs[0].Perm.Key != 0x55 || hs[0].Otime != s.Otime || hs[0].Ctime != s.Ctime {
		t.Fatalf("headers %+v (total %d), set %+v", hs, total, s)
	}
	if hs, _ := e.SetHeaders(1, 10); len(hs) != 0 {
		t.Fatalf("headers past the end: %+v", hs)
	}
	h, page, err := e.SetPage(id, 1, 5)
	if err != nil || h.ID != id || len(page) != 2 || page[0] != s.Sems[1] || page[1] != s.Sems[2] {
		t.Fatalf("page %+v %+v %v", h, page, err)
	}
	if _, _, err := e.SetPage(id+1, 0, 5); err == nil {
		t.Fatal("page of no set")
	}
	if w1, n := e.WaitersN(1); n != 2 || len(w1) != 1 || w1[0].Pid != ws[0].Pid {
		t.Fatalf("waiters capped at 1: %+v of %d", w1, n)
	}
	if u0, n := e.UndosN(0, 0, 10); n != 1 || len(u0) != 0 {
		t.Fatalf("undos capped at 0: %+v of %d", u0, n)
	}
	if u1, n := e.UndosN(5, 0, 10); n != 1 || len(u1) != 1 || len(u1[0].Adj) != 3 || u1[0].Adj[1] != 2 || u1[0].Nsems != 3 {
		t.Fatalf("undos: %+v of %d", u1, n)
	}
	if u1, n := e.SetUndos(id, 5, 1, 1); n != 1 || len(u1) != 1 || len(u1[0].Adj) != 1 || u1[0].Adj[0] != 2 || u1[0].AdjOffset != 1 {
		t.Fatalf("the set's undos, window [1,2): %+v of %d", u1, n)
	}
	cancel()
	<-done
	<-done
	if sm := e.Summary(); sm.Waiters != 0 {
		t.Fatalf("summary after the sleepers left: %+v", sm)
	}
	e.Exit(ipcns.NewPid(root, 11)) // a different handle: nothing applied
	if len(e.Undos()) != 1 {
		t.Fatal("undo entry dropped by another process's exit")
	}
}
