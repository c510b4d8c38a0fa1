package msgengine

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// Engine-only tests of what the kernel has no counterpart for: Commit and
// its rollback, the thread handle, the memory bound, and a stress test of
// cancellation that counts every message.

type fixture struct {
	e     *Engine
	texts *textTracker
	pidns *ipcns.PidNamespace
	n     atomic.Int32
}

func newFixture(lim ipcns.Limits) *fixture {
	e := New(ipcns.NewResources("t", lim))
	return &fixture{e: e, texts: trackTexts(e), pidns: ipcns.NewPidNamespace(nil, 1)}
}

func (f *fixture) caller() *ipcns.Caller {
	return &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(f.pidns, 100+f.n.Add(1))}
}

// waitSleeping waits until c sleeps on some queue.
func (f *fixture) waitSleeping(t *testing.T, c *ipcns.Caller) {
	t.Helper()
	for i := 0; i < 100000; i++ {
		if f.e.sleeping(c) {
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
	t.Fatal("caller never slept")
}

func mustStat(t *testing.T, f *fixture, c *ipcns.Caller, id int32) MsqidDS {
	t.Helper()
	ds, _, err := f.e.Stat(c, id, ipcns.IPCStat)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestCommitDirectReceiveRollback(t *testing.T) {
	f := newFixture(ipcns.DefaultLimits())
	c := f.caller()
	id, _ := f.e.Msgget(c, ipcns.IPCPrivate, 0o600)
	for _, s := range []string{"a", "bb", "ccc"} {
		if err := f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: id, Type: int64(len(s)), Data: []byte(s)}); err != nil {
			t.Fatal(err)
		}
	}
	var seen string
	_, err := f.e.Msgrcv(context.Background(), c, &RcvOp{MsqID: id, Size: 10, Type: 2,
		Commit: func(m *Message) bool { seen = string(m.Data); return false }})
	if err != ErrNotDelivered || seen != "bb" {
		t.Fatalf("got %v, commit saw %q", err, seen)
	}
	ds := mustStat(t, f, c, id)
	if ds.Qnum != 3 || ds.Cbytes != 6 || ds.Rtime != 0 || ds.Lrpid != 0 {
		t.Fatalf("rollback left %+v", ds)
	}
	// Still in its place: first of the queue after "a".
	for _, want := range []string{"a", "bb", "ccc"} {
		m, err := f.e.Msgrcv(context.Background(), c, &RcvOp{MsqID: id, Size: 10})
		if err != nil || string(m.Data) != want {
			t.Fatalf("got %q %v, want %q", m.Data, err, want)
		}
	}
}

func TestCommitPipelinedRollback(t *testing.T) {
	f := newFixture(ipcns.DefaultLimits())
	c := f.caller()
	id, _ := f.e.Msgget(c, ipcns.IPCPrivate, 0o600)
	r1, r2 := f.caller(), f.caller()
	type res struct {
		m   Message
		err error
	}
	ch1, ch2 := make(chan res, 1), make(chan res, 1)
	go func() {
		m, err := f.e.Msgrcv(context.Background(), r1, &RcvOp{MsqID: id, Size: 10,
			Commit: func(*Message) bool { return false }})
		ch1 <- res{m, err}
	}()
	f.waitSleeping(t, r1)
	var got []byte
	go func() {
		m, err := f.e.Msgrcv(context.Background(), r2, &RcvOp{MsqID: id, Size: 10,
			Commit: func(m *Message) bool { got = append([]byte(nil), m.Data...); return true }})
		ch2 <- res{m, err}
	}()
	f.waitSleeping(t, r2)
	if err := f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: id, Type: 1, Data: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if r := <-ch1; r.err != ErrNotDelivered {
		t.Fatalf("r1: %v", r.err)
	}
	if r := <-ch2; r.err != nil || string(r.m.Data) != "hi" || string(got) != "hi" {
		t.Fatalf("r2: %q %v (commit saw %q)", r.m.Data, r.err, got)
	}
	ds := mustStat(t, f, c, id)
	if ds.Qnum != 0 || ds.Lrpid != r2.Pid.In(f.pidns) {
		t.Fatalf("after pipelined: %+v", ds)
	}

	// A lone refusing receiver: the message is queued, lrpid and rtime
	// untouched.
	go func() {
		m, err := f.e.Msgrcv(context.Background(), r1, &RcvOp{MsqID: id, Size: 10, Type: 5,
			Commit: func(*Message) bool { return false }})
		ch1 <- res{m, err}
	}()
	f.waitSleeping(t, r1)
	before := mustStat(t, f, c, id)
	if err := f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: id, Type: 5, Data: []byte("five")}); err != nil {
		t.Fatal(err)
	}
	if r := <-ch1; r.err != ErrNotDelivered {
		t.Fatalf("r1: %v", r.err)
	}
	ds = mustStat(t, f, c, id)
	if ds.Qnum != 1 || ds.Cbytes != 4 || ds.Lrpid != before.Lrpid || ds.Rtime != before.Rtime {
		t.Fatalf("after refused pipelined send: %+v (before %+v)", ds, before)
	}
}

func TestCommitSleepingSenderRollback(t *testing.T) {
	f := newFixture(ipcns.DefaultLimits())
	c := f.caller()
	id, _ := f.e.Msgget(c, ipcns.IPCPrivate, 0o600)
	if err := f.e.Set(c, id, 0, 0, 0o600, 4); err != nil {
		t.Fatal(err)
	}
	f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: id, Type: 1, Data: []byte("full")})
	s1, s2 := f.caller(), f.caller()
	e1, e2 := make(chan error, 1), make(chan error, 1)
	go func() {
		e1 <- f.e.Msgsnd(context.Background(), s1, &SndOp{MsqID: id, Type: 2, Data: []byte("no"),
			Commit: func() bool { return false }})
	}()
	f.waitSleeping(t, s1)
	go func() {
		e2 <- f.e.Msgsnd(context.Background(), s2, &SndOp{MsqID: id, Type: 3, Data: []byte("yes"),
			Commit: func() bool { return true }})
	}()
	f.waitSleeping(t, s2)
	if _, err := f.e.Msgrcv(context.Background(), c, &RcvOp{MsqID: id, Size: 10}); err != nil {
		t.Fatal(err)
	}
	if err := <-e1; err != ErrNotDelivered {
		t.Fatalf("s1: %v", err)
	}
	if err := <-e2; err != nil {
		t.Fatalf("s2: %v", err)
	}
	ds := mustStat(t, f, c, id)
	if ds.Qnum != 1 || ds.Cbytes != 3 || ds.Lspid != s2.Pid.In(f.pidns) {
		t.Fatalf("%+v", ds)
	}
}

func TestPipelinedRecordsThread(t *testing.T) {
	// pipelined_send records task_pid(receiver): the thread; a receive
	// that finds its message records task_tgid.
	f := newFixture(ipcns.DefaultLimits())
	c := f.caller()
	id, _ := f.e.Msgget(c, ipcns.IPCPrivate, 0o600)
	r := f.caller()
	thread := ipcns.NewPid(f.pidns, 777)
	done := make(chan error, 1)
	go func() {
		_, err := f.e.Msgrcv(context.Background(), r, &RcvOp{MsqID: id, Size: 10, Thread: thread})
		done <- err
	}()
	f.waitSleeping(t, r)
	f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: id, Type: 1, Data: []byte("x")})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ds := mustStat(t, f, c, id); ds.Lrpid != 777 {
		t.Fatalf("lrpid %d, want the thread's 777", ds.Lrpid)
	}
	f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: id, Type: 1, Data: []byte("x")})
	f.e.Msgrcv(context.Background(), r, &RcvOp{MsqID: id, Size: 10, Thread: thread})
	if ds := mustStat(t, f, c, id); ds.Lrpid != r.Pid.In(f.pidns) {
		t.Fatalf("lrpid %d, want the process's %d", ds.Lrpid, r.Pid.In(f.pidns))
	}
}

func TestMemoryBound(t *testing.T) {
	lim := ipcns.DefaultLimits()
	lim.MsgMNI, lim.MsgMNB, lim.MsgMax = 2, 100, 100
	f := newFixture(lim)
	c := f.caller()
	a, _ := f.e.Msgget(c, ipcns.IPCPrivate, 0o600)
	b, _ := f.e.Msgget(c, ipcns.IPCPrivate, 0o600)
	// CAP_SYS_RESOURCE may raise qbytes far above msgmnb...
	if err := f.e.Set(c, a, 0, 0, 0o600, 1<<20); err != nil {
		t.Fatal(err)
	}
	sent := 0
	for {
		err := f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: a, Type: 1, Data: make([]byte, 50), Flags: IPCNoWait})
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent += 50
	}
	// ...but the namespace never holds more than msgmni × msgmnb.
	if sent != 200 {
		t.Fatalf("queue a took %d bytes, want the whole budget 200", sent)
	}
	if err := f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: b, Type: 1, Data: []byte("x"), Flags: IPCNoWait}); err != unix.EAGAIN {
		t.Fatalf("queue b over budget: %v", err)
	}
	// Draining a gives the excess back.
	for i := 0; i < 4; i++ {
		f.e.Msgrcv(context.Background(), c, &RcvOp{MsqID: a, Size: 100})
	}
	if got := f.e.reserved.Load(); got != 100 {
		t.Fatalf("reserved %d after draining, want a's baseline 100", got)
	}
	if err := f.e.Msgsnd(context.Background(), c, &SndOp{MsqID: b, Type: 1, Data: []byte("x"), Flags: IPCNoWait}); err != nil {
		t.Fatal(err)
	}
	f.e.Remove(c, a)
	f.e.Remove(c, b)
	if got := f.e.reserved.Load(); got != 0 {
		t.Fatalf("reserved %d after removal", got)
	}
}

// TestStressCancel runs senders and receivers with random cancellations
// and refusing Commits on a small queue, and checks that every message
// sent is received exactly once or still queued.
func TestStressCancel(t *testing.T) {
	f := newFixture(ipcns.DefaultLimits())
	c := f.caller()
	id, _ := f.e.Msgget(c, ipcns.IPCPrivate, 0o600)
	f.e.Set(c, id, 0, 0, 0o600, 64)
	const workers, per = 4, 400
	var sentOK, recvOK sync.Map
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(2)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			me := f.caller()
			for i := 0; i < per; i++ {
				n := next.Add(1)
				data := []byte{byte(n), byte(n >> 8), byte(n >> 16)}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Microsecond)
				refuse := rng.IntN(8) == 0
				err := f.e.Msgsnd(ctx, me, &SndOp{MsqID: id, Type: 1 + int64(rng.IntN(3)), Data: data,
					Commit: func() bool { return !refuse }})
				cancel()
				if err == nil {
					sentOK.Store(n, true)
				} else if err != unix.EINTR && err != ErrNotDelivered {
					t.Error(err)
				}
			}
		}(uint64(w))
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 2))
			me := f.caller()
			for i := 0; i < per; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Microsecond)
				refuse := rng.IntN(8) == 0
				typ := int64(rng.IntN(5)) - 1 // -1..3
				m, err := f.e.Msgrcv(ctx, me, &RcvOp{MsqID: id, Size: 8, Type: typ,
					Commit: func(*Message) bool { return !refuse }})
				cancel()
				if err == nil {
					n := int64(m.Data[0]) | int64(m.Data[1])<<8 | int64(m.Data[2])<<16
					if _, dup := recvOK.LoadOrStore(n, true); dup {
						t.Errorf("message %d received twice", n)
					}
				} else if err != unix.EINTR && err != ErrNotDelivered && err != unix.ENOMSG {
					t.Error(err)
				}
			}
		}(uint64(w))
	}
	wg.Wait()
	for {
		m, err := f.e.Msgrcv(context.Background(), c, &RcvOp{MsqID: id, Size: 8, Flags: IPCNoWait})
		if errors.Is(err, unix.ENOMSG) {
			break
		}
		n := int64(m.Data[0]) | int64(m.Data[1])<<8 | int64(m.Data[2])<<16
		if _, dup := recvOK.LoadOrStore(n, true); dup {
			t.Errorf("message %d received twice", n)
		}
	}
	sentOK.Range(func(k, _ any) bool {
		if _, ok := recvOK.Load(k); !ok {
			t.Errorf("message %d lost", k)
		}
		return true
	})
	recvOK.Range(func(k, _ any) bool {
		if _, ok := sentOK.Load(k); !ok {
			t.Errorf("message %d received but never sent", k)
		}
		return true
	})
	f.texts.checkTexts(t, f.e)
}
