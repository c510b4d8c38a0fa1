package msgengine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/kernelipc"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// Benchmarks: each runs the same work on the kernel (threads of this
// process in a fresh IPC namespace) and on the engine (goroutines), and
// reports both and their ratio. Run:
//
//	go test -run '^$' -bench . -benchtime 20000x ./msgengine/

// inKernelNS runs workers, each on its own thread in one fresh IPC
// namespace; setup runs first, on the namespace's first thread.
func inKernelNS(b *testing.B, setup func(), workers ...func()) time.Duration {
	needKernel(b)
	var elapsed time.Duration
	err := kernelipc.InFreshNamespace(func() {
		setup()
		fd, err := unix.Open("/proc/thread-self/ns/ipc", unix.O_RDONLY, 0)
		if err != nil {
			panic(err)
		}
		defer unix.Close(fd)
		var ready, wg sync.WaitGroup
		start := make(chan struct{})
		for _, w := range workers {
			ready.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // never unlocked: the thread dies with us
				if err := unix.Setns(fd, unix.CLONE_NEWIPC); err != nil {
					panic(err)
				}
				ready.Done()
				<-start
				w()
			}()
		}
		ready.Wait()
		t0 := time.Now()
		close(start)
		wg.Wait()
		elapsed = time.Since(t0)
	})
	if err != nil {
		b.Fatal(err)
	}
	return elapsed
}

func runGoroutines(workers ...func()) time.Duration {
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w() }()
	}
	wg.Wait()
	return time.Since(t0)
}

// The kernel loops retry EINTR: the Go runtime's preemption signal
// (SIGURG) interrupts blocked msgsnd/msgrcv calls of this process.

func kSnd(b *testing.B, id int, typ int64) {
	buf := [16]byte{}
	buf[0] = byte(typ)
	for {
		_, e := kernelipc.Msgsnd(id, buf[:], 8, 0)
		if e == 0 {
			return
		}
		if e != unix.EINTR {
			panic(e)
		}
	}
}

func kRcv(id int, typ int64, flg int) unix.Errno {
	var buf [8 + 64]byte
	for {
		_, e := kernelipc.Msgrcv(id, buf[:], 64, typ, flg)
		if e != unix.EINTR {
			return e
		}
	}
}

// pingPongKernel: n round trips between two threads on queue id.
func pingPongKernelWorkers(b *testing.B, id *int, n int) []func() {
	return []func(){
		func() {
			for i := 0; i < n; i++ {
				kSnd(b, *id, 1)
				if e := kRcv(*id, 2, 0); e != 0 {
					panic(e)
				}
			}
		},
		func() {
			for i := 0; i < n; i++ {
				if e := kRcv(*id, 1, 0); e != 0 {
					panic(e)
				}
				kSnd(b, *id, 2)
			}
		},
	}
}

func pingPongEngineWorkers(e *Engine, id int32, n int, pidns *ipcns.PidNamespace, k int32) []func() {
	ca := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(pidns, 10+2*k)}
	cb := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(pidns, 11+2*k)}
	ctx := context.Background()
	data := []byte("pingpong")
	return []func(){
		func() {
			for i := 0; i < n; i++ {
				if err := e.Msgsnd(ctx, ca, &SndOp{MsqID: id, Type: 1, Data: data}); err != nil {
					panic(err)
				}
				if _, err := e.Msgrcv(ctx, ca, &RcvOp{MsqID: id, Size: 64, Type: 2}); err != nil {
					panic(err)
				}
			}
		},
		func() {
			for i := 0; i < n; i++ {
				if _, err := e.Msgrcv(ctx, cb, &RcvOp{MsqID: id, Size: 64, Type: 1}); err != nil {
					panic(err)
				}
				if err := e.Msgsnd(ctx, cb, &SndOp{MsqID: id, Type: 2, Data: data}); err != nil {
					panic(err)
				}
			}
		},
	}
}

func report(b *testing.B, n int, kernel, engine time.Duration, unit string) {
	b.ReportMetric(float64(kernel.Nanoseconds())/float64(n), "kernel-ns/"+unit)
	b.ReportMetric(float64(engine.Nanoseconds())/float64(n), "engine-ns/"+unit)
	b.ReportMetric(float64(kernel)/float64(engine), "engine-speedup")
	b.ReportMetric(0, "ns/op") // the figures above are the result
}

// BenchmarkPingPong: two workers on one queue, a round trip per op.
func BenchmarkPingPong(b *testing.B) {
	n := b.N
	var id int
	kt := inKernelNS(b, func() {
		r, e := kernelipc.Msgget(0, 0o600)
		if e != 0 {
			b.Fatal(e)
		}
		id = r
	}, pingPongKernelWorkers(b, &id, n)...)
	e := New(ipcns.NewResources("bench", ipcns.DefaultLimits()))
	pidns := ipcns.NewPidNamespace(nil, 1)
	c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(pidns, 1)}
	qid, _ := e.Msgget(c, 0, 0o600)
	et := runGoroutines(pingPongEngineWorkers(e, qid, n, pidns, 0)...)
	report(b, n, kt, et, "roundtrip")
}

// BenchmarkPairs: N pairs ping-ponging on N queues; ops are round trips
// of all pairs together, so the figure per round trip falls as pairs
// scale.
func BenchmarkPairs(b *testing.B) {
	for _, pairs := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("pairs=%d", pairs), func(b *testing.B) {
			n := b.N
			ids := make([]int, pairs)
			var kw []func()
			for p := range pairs {
				kw = append(kw, pingPongKernelWorkers(b, &ids[p], n/pairs+1)...)
			}
			kt := inKernelNS(b, func() {
				for p := range ids {
					r, e := kernelipc.Msgget(0, 0o600)
					if e != 0 {
						b.Fatal(e)
					}
					ids[p] = r
				}
			}, kw...)
			e := New(ipcns.NewResources("bench", ipcns.DefaultLimits()))
			pidns := ipcns.NewPidNamespace(nil, 1)
			c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(pidns, 1)}
			var ew []func()
			for p := range pairs {
				qid, _ := e.Msgget(c, 0, 0o600)
				ew = append(ew, pingPongEngineWorkers(e, qid, n/pairs+1, pidns, int32(p))...)
			}
			et := runGoroutines(ew...)
			report(b, n, kt, et, "roundtrip")
		})
	}
}

// BenchmarkDeepQueue: a queue of 10,000 one-byte messages of random types
// 1..100; each op receives one by type selection and sends it back to the
// tail, so the depth stays. lesseq (msgtyp -100: the lowest type) makes
// Linux walk the whole queue every time; equal and except pick by type.
func BenchmarkDeepQueue(b *testing.B) {
	const depth, types = 10000, 100
	typesOf := make([]int64, depth)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range typesOf {
		typesOf[i] = 1 + int64(rng.IntN(types))
	}
	cases := []struct {
		name string
		typ  func(i int) int64
		flg  int
	}{
		{"lesseq", func(int) int64 { return -types }, 0},
		{"equal", func(i int) int64 { return 1 + int64(i%types) }, 0},
		{"except", func(i int) int64 { return 1 + int64(i%types) }, MsgExcept},
	}
	for _, cs := range cases {
		b.Run(cs.name, func(b *testing.B) {
			n := b.N
			var id int
			kt := inKernelNS(b, func() {
				r, e := kernelipc.Msgget(0, 0o600)
				if e != 0 {
					b.Fatal(e)
				}
				id = r
				for _, t := range typesOf {
					buf := [9]byte{}
					buf[0] = byte(t)
					if _, e := kernelipc.Msgsnd(id, buf[:], 1, ipcns.IPCNoWait); e != 0 {
						b.Fatal(e)
					}
				}
			}, func() {
				var buf [8 + 16]byte
				for i := 0; i < n; i++ {
					if _, e := kernelipc.Msgrcv(id, buf[:], 16, cs.typ(i), cs.flg|ipcns.IPCNoWait); e != 0 {
						panic(e)
					}
					if _, e := kernelipc.Msgsnd(id, buf[:], 1, ipcns.IPCNoWait); e != 0 {
						panic(e)
					}
				}
			})
			e := New(ipcns.NewResources("bench", ipcns.DefaultLimits()))
			pidns := ipcns.NewPidNamespace(nil, 1)
			c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(pidns, 1)}
			qid, _ := e.Msgget(c, 0, 0o600)
			ctx := context.Background()
			for _, t := range typesOf {
				if err := e.Msgsnd(ctx, c, &SndOp{MsqID: qid, Type: t, Data: []byte{1}, Flags: IPCNoWait}); err != nil {
					b.Fatal(err)
				}
			}
			et := runGoroutines(func() {
				for i := 0; i < n; i++ {
					m, err := e.Msgrcv(ctx, c, &RcvOp{MsqID: qid, Size: 16, Type: cs.typ(i), Flags: cs.flg})
					if err != nil {
						panic(err)
					}
					if err := e.Msgsnd(ctx, c, &SndOp{MsqID: qid, Type: m.Type, Data: m.Data}); err != nil {
						panic(err)
					}
				}
			})
			report(b, n, kt, et, "op")
		})
	}
}

// BenchmarkQueuedOverhead measures the engine's memory per queued message
// beyond its text: heap growth over 100,000 queued messages (text
// allocation included, as the gateway makes it), less the text bytes.
func BenchmarkQueuedOverhead(b *testing.B) {
	for _, size := range []int{1, 8, 64, 100, 512, 1000, 4000} {
		b.Run(fmt.Sprintf("text=%d", size), func(b *testing.B) {
			const msgs = 100000
			lim := ipcns.DefaultLimits()
			lim.MsgMNB = 1 << 30
			lim.MsgMax = 8192
			// One measurement whatever b.N: it is a size, not a speed.
			var over float64
			for it := 0; it < 1; it++ {
				e := New(ipcns.NewResources("bench", lim))
				c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(ipcns.NewPidNamespace(nil, 1), 1)}
				qid, _ := e.Msgget(c, 0, 0o600)
				ctx := context.Background()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := 0; i < msgs; i++ {
					data := make([]byte, size)
					if err := e.Msgsnd(ctx, c, &SndOp{MsqID: qid, Type: 1 + int64(i%50), Data: data, Flags: IPCNoWait}); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				over = float64(after.HeapAlloc-before.HeapAlloc)/msgs - float64(size)
				runtime.KeepAlive(e)
			}
			b.ReportMetric(over, "overhead-B/msg")
			b.ReportMetric(0, "ns/op")
		})
	}
}
