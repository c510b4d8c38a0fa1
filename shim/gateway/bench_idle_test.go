package gateway_test

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
	"golang.org/x/sys/unix"
)

// BenchmarkIdleWaiters measures what sleeping calls cost the shim: N
// processes asleep in semop (or msgrcv) for a few seconds, served by the
// gateway (testdata/sleepers.c). The quiet window is the longest gap
// between two trapped calls (every sleeper has been served and nothing
// else is called until the object is removed); the test process's CPU
// time (getrusage, sampled every 100 ms: the gateway's receiving thread,
// event loop, timers and the Go runtime) over that window, less its first
// second (the collector finishing with the setup) and last 200 ms, is reported as a percentage of one core, and the Go heap in
// use during it, less that of a run without sleepers, per sleeper.
//
//	go test -run XXX -bench IdleWaiters -benchtime 1x ./shim/gateway
func BenchmarkIdleWaiters(b *testing.B) {
	bin := buildC(b, "testdata/sleepers.c")
	for _, kind := range []string{"sem", "msg"} {
		var base float64
		for _, n := range []int{0, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/sleepers=%d", kind, n), func(b *testing.B) {
				cpu, heap := idleRun(b, bin, n, kind, 6)
				if n == 0 {
					base = heap
				}
				b.ReportMetric(100*cpu, "%core-idle")
				if n > 0 {
					b.ReportMetric((heap-base)/float64(n), "heap-B/sleeper")
				}
			})
		}
	}
}

// gapTimer is an EngineTable that records when each call arrived,
// keeping the longest gap between two.
type gapTimer struct {
	gateway.EngineTable
	mu               sync.Mutex
	last, from, till time.Time
}

func (g *gapTimer) EnginesOf(t *gateway.Task) (*gateway.Engines, error) {
	now := time.Now()
	g.mu.Lock()
	if !g.last.IsZero() && now.Sub(g.last) > g.till.Sub(g.from) {
		g.from, g.till = g.last, now
	}
	g.last = now
	g.mu.Unlock()
	return g.EngineTable.EnginesOf(t)
}

type idleSample struct {
	at   time.Time
	cpu  time.Duration
	heap uint64
}

// idleRun serves one run of the sleepers program; it returns the CPU
// share used in its quiet window and the median Go heap in use then.
func idleRun(b *testing.B, bin string, n int, kind string, secs int) (float64, float64) {
	var samples []idleSample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		var ru unix.Rusage
		var ms runtime.MemStats
		for {
			unix.Getrusage(unix.RUSAGE_SELF, &ru)
			runtime.ReadMemStats(&ms)
			samples = append(samples, idleSample{time.Now(), time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ms.HeapInuse})
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	h := &gapTimer{EngineTable: harness.NewEnginesByInode()}
	out := serve(b, h, bin, fmt.Sprint(n), kind, fmt.Sprint(secs))
	close(stop)
	wg.Wait()
	if string(out) != "ok\n" {
		b.Fatalf("sleepers: %q", out)
	}
	from, till := h.from.Add(time.Second), h.till.Add(-200*time.Millisecond)
	var in []idleSample
	for _, s := range samples {
		if s.at.After(from) && s.at.Before(till) {
			in = append(in, s)
		}
	}
	if len(in) < 2 {
		b.Fatalf("quiet window %v–%v holds %d samples", h.from, h.till, len(in))
	}
	first, last := in[0], in[len(in)-1]
	share := float64(last.cpu-first.cpu) / float64(last.at.Sub(first.at))
	heaps := make([]float64, len(in))
	for i, s := range in {
		heaps[i] = float64(s.heap)
	}
	sort.Float64s(heaps)
	return share, heaps[len(heaps)/2]
}
