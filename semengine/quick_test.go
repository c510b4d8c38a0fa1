package semengine

import (
	"context"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

func TestQuick(t *testing.T) {
	ns := ipcns.NewNamespace("t", ipcns.DefaultLimits())
	e := New(ns)
	root := ipcns.NewPidNamespace(nil, 1)
	c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(root, 100)}
	id, err := e.Semget(c, 0, 2, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Semop(context.Background(), c, &Op{SemID: id, Sops: []Sembuf{{Num: 0, Op: -1, Flg: IPCNoWait}}}); err != unix.EAGAIN {
		t.Fatalf("want EAGAIN, got %v", err)
	}
	done := make(chan error)
	go func() {
		done <- e.Semop(context.Background(), c, &Op{SemID: id, Sops: []Sembuf{{Num: 0, Op: -1}}})
	}()
	time.Sleep(10 * time.Millisecond)
	if n, _ := e.Get(c, id, 0, GetNCnt); n != 1 {
		t.Fatalf("ncnt %d", n)
	}
	if err := e.Semop(context.Background(), c, &Op{SemID: id, Sops: []Sembuf{{Num: 0, Op: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, _ := e.Get(c, id, 0, GetVal); v != 0 {
		t.Fatalf("val %d", v)
	}
	if p, _ := e.Get(c, id, 0, GetPID); p != 100 {
		t.Fatalf("pid %d", p)
	}
}
