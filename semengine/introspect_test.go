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
	cancel()
	<-done
	<-done
	e.Exit(ipcns.NewPid(root, 11)) // a different handle: nothing applied
	if len(e.Undos()) != 1 {
		t.Fatal("undo entry dropped by another process's exit")
	}
}
