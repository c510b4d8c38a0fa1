package semengine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/kernelipc"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// Benchmarks run the kernel and the engine in the same run, so that the
// figures compare as ratios on a noisy machine:
//
//	go test -run '^$' -bench . -benchtime 200000x ./semengine/
//
// The kernel side runs in a fresh IPC namespace; its workers are threads
// that entered it.

// TestSemSize is the memory rule: one semaphore costs at most 64 bytes.
func TestSemSize(t *testing.T) {
	if n := unsafe.Sizeof(sem{}); n > 64 {
		t.Fatalf("sem is %d bytes, want <= 64", n)
	}
}

// worker runs one worker's loop: on the kernel, on a thread in ns; on the
// engine, as a goroutine.
type bside struct {
	name string
	// setup makes a set of n semaphores with the given values and returns
	// a function that makes an op function for worker w.
	setup func(b *testing.B, n int, vals []uint16) (semop func(w int) func(sops []Sembuf) error, run func(workers int, f func(w int)), done func())
}

func benchSides() []bside {
	return []bside{
		{name: "kernel", setup: kernelSetup},
		{name: "engine", setup: engineSetup},
	}
}

func kernelSetup(b *testing.B, n int, vals []uint16) (func(int) func([]Sembuf) error, func(int, func(int)), func()) {
	if !kernelipc.Available() {
		b.Skip("cannot create IPC namespaces")
	}
	ns, err := kernelipc.NewNamespaceFD()
	if err != nil {
		b.Fatal(err)
	}
	var id int
	_ = ns.Run(func() {
		var e unix.Errno
		if id, e = kernelipc.Semget(ipcns.IPCPrivate, n, 0o600); e != 0 {
			b.Fatal(e)
		}
		buf := make([]byte, 2*n)
		for i, v := range vals {
			buf[2*i], buf[2*i+1] = byte(v), byte(v>>8)
		}
		if _, e := kernelipc.SemctlBuf(id, 0, SetAll, buf); e != 0 {
			b.Fatal(e)
		}
	})
	semop := func(int) func([]Sembuf) error {
		return func(sops []Sembuf) error {
			ks := *(*[]kernelipc.Sembuf)(unsafe.Pointer(&sops))
			for {
				_, e := kernelipc.Semtimedop(id, ks, nil)
				switch e {
				case 0:
					return nil
				case unix.EINTR:
					// The Go runtime's preemption signal interrupts a
					// sleeping semop; a C program would not see it.
					continue
				}
				return e
			}
		}
	}
	run := func(workers int, f func(int)) {
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				if err := ns.Run(func() { f(w) }); err != nil {
					b.Error(err)
				}
			}(w)
		}
		wg.Wait()
	}
	return semop, run, func() { ns.Close() }
}

func engineSetup(b *testing.B, n int, vals []uint16) (func(int) func([]Sembuf) error, func(int, func(int)), func()) {
	e, root := newTestEngine("bench")
	main := rootCaller(root, 1)
	id, err := e.Semget(main, ipcns.IPCPrivate, n, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.SetAll(main, id, func(int) ([]uint16, error) { return vals, nil }); err != nil {
		b.Fatal(err)
	}
	semop := func(w int) func([]Sembuf) error {
		c := rootCaller(root, int32(10+w))
		ctx := context.Background()
		op := &Op{SemID: id}
		return func(sops []Sembuf) error {
			op.Sops = sops
			return e.Semop(ctx, c, op)
		}
	}
	run := func(workers int, f func(int)) {
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) { defer wg.Done(); f(w) }(w)
		}
		wg.Wait()
	}
	return semop, run, func() {}
}

// BenchmarkPair is the uncontended lock+unlock pair: semop -1 then +1.
func BenchmarkPair(b *testing.B) {
	for _, flg := range []int16{0, SemUndo} {
		for _, side := range benchSides() {
			name := side.name
			if flg != 0 {
				name += "/undo"
			}
			b.Run(name, func(b *testing.B) {
				semop, run, done := side.setup(b, 1, []uint16{1})
				defer done()
				lock, unlock := []Sembuf{{Op: -1, Flg: flg}}, []Sembuf{{Op: 1, Flg: flg}}
				b.ResetTimer()
				run(1, func(w int) {
					op := semop(w)
					for i := 0; i < b.N; i++ {
						if op(lock) != nil || op(unlock) != nil {
							b.Error("semop failed")
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkContended is two workers taking turns on one semaphore: a lock,
// a critical section of nothing, an unlock. ns/op is per pair.
func BenchmarkContended(b *testing.B) {
	for _, side := range benchSides() {
		b.Run(side.name, func(b *testing.B) {
			semop, run, done := side.setup(b, 1, []uint16{1})
			defer done()
			lock, unlock := []Sembuf{{Op: -1}}, []Sembuf{{Op: 1}}
			b.ResetTimer()
			run(2, func(w int) {
				op := semop(w)
				for i := w; i < b.N; i += 2 {
					if op(lock) != nil || op(unlock) != nil {
						b.Error("semop failed")
						return
					}
				}
			})
		})
	}
}

// BenchmarkScaling runs 1 or 2 workers, each on its own semaphore of one
// set. ns/op is per pair and per worker: perfect scaling keeps it flat;
// the pairs/s metric is the total rate. The "cpu" side is the control: a
// loop of arithmetic that shares nothing, showing how much the machine
// itself lets two workers scale at that moment.
func BenchmarkScaling(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("cpu/workers=%d", workers), func(b *testing.B) {
			var sink [2][8]uint64 // a cache line each
			var wg sync.WaitGroup
			start := time.Now()
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					x := uint64(w)
					for i := 0; i < 40*b.N; i++ {
						x = x*6364136223846793005 + 1442695040888963407
					}
					sink[w][0] = x
				}(w)
			}
			wg.Wait()
			b.ReportMetric(float64(workers*b.N)/time.Since(start).Seconds(), "pairs/s")
		})
	}
	for _, side := range benchSides() {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", side.name, workers), func(b *testing.B) {
				semop, run, done := side.setup(b, 4, []uint16{1, 1, 1, 1})
				defer done()
				b.ResetTimer()
				start := time.Now()
				run(workers, func(w int) {
					op := semop(w)
					num := uint16(w) // adjacent semaphores: neighbouring cache lines
					lock, unlock := []Sembuf{{Num: num, Op: -1}}, []Sembuf{{Num: num, Op: 1}}
					for i := 0; i < b.N; i++ {
						if op(lock) != nil || op(unlock) != nil {
							b.Error("semop failed")
							return
						}
					}
				})
				b.ReportMetric(float64(workers*b.N)/time.Since(start).Seconds(), "pairs/s")
			})
		}
	}
}

// BenchmarkComplexMix is two workers doing simple pairs on their own
// semaphores of a 256-semaphore set, where one operation in 32 is a complex
// one (over the worker's semaphore and another): each complex operation
// puts the set in whole-set lock mode, and entering it sweeps all 256
// per-semaphore locks. With hysteresis the set stays in whole-set mode for
// a few operations instead of sweeping at every complex operation;
// "nohysteresis" leaves at the first chance.
func BenchmarkComplexMix(b *testing.B) {
	const nsems = 256
	vals := make([]uint16, nsems)
	for i := range vals {
		vals[i] = 10
	}
	sides := benchSides()
	for _, side := range []struct {
		bside
		hyst int32
	}{{sides[0], 10}, {sides[1], 10}, {bside{name: "engine-nohysteresis", setup: engineSetup}, 1}} {
		b.Run(side.name, func(b *testing.B) {
			old := globalLockHysteresis
			globalLockHysteresis = side.hyst
			defer func() { globalLockHysteresis = old }()
			semop, run, done := side.setup(b, nsems, vals)
			defer done()
			b.ResetTimer()
			run(2, func(w int) {
				op := semop(w)
				mine, other := uint16(w), uint16(128+w)
				lock, unlock := []Sembuf{{Num: mine, Op: -1}}, []Sembuf{{Num: mine, Op: 1}}
				both := []Sembuf{{Num: mine, Op: -1}, {Num: other, Op: -1}}
				bothBack := []Sembuf{{Num: mine, Op: 1}, {Num: other, Op: 1}}
				for i := 0; i < b.N; i++ {
					l, u := lock, unlock
					if i%32 == 31 {
						l, u = both, bothBack
					}
					if op(l) != nil || op(u) != nil {
						b.Error("semop failed")
						return
					}
				}
			})
		})
	}
}
