package gateway_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/listener"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
)

// serveFloor runs argv trapped by the harness's filter and answers every
// notification 0 at once with the cheapest Go supervisor there is (the
// one of ../shared/notify-floor: a goroutine on a locked OS thread
// blocking in RECV, SYNC_WAKE_UP set), for the floor of a trapped call
// measured with the same child and the same filter as the gateway.
func serveFloor(tb testing.TB, argv ...string) []byte {
	return serveFloorWith(tb, 1, true, argv...)
}

// serveFloorWith is serveFloor with receivers goroutines (each on its own
// locked thread) blocking in RECV on the one listener, and SYNC_WAKE_UP
// set or not: the variants that could let a listener scale.
func serveFloorWith(tb testing.TB, receivers int, syncWake bool, argv ...string) []byte {
	tb.Helper()
	if why := harness.Supported(); why != "" {
		tb.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), serveTimeout)
	defer cancel()
	srv, err := listener.Listen(filepath.Join(tb.TempDir(), "l.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go srv.Serve(ctx, func(ctx context.Context, m *listener.Message) error {
		l, err := seccompnotify.New(m.SeccompFile())
		if err != nil {
			served <- err
			return err
		}
		defer l.Close()
		if syncWake {
			_ = l.SetSyncWakeUp()
		}
		recv := func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var n seccompnotify.Notif
			for {
				if err := l.Recv(&n); err != nil {
					if l.Hungup() {
						return
					}
					continue
				}
				_ = l.Reply(n.ID, 0, 0)
			}
		}
		var wg sync.WaitGroup
		for range receivers - 1 {
			wg.Go(recv)
		}
		recv()
		wg.Wait()
		served <- nil
		return nil
	})
	out, err := harness.Command(srv.Addr(), argv...).Output()
	if err != nil {
		tb.Fatalf("trapped %v: %v\n%s", argv, err, out)
	}
	if err := <-served; err != nil {
		tb.Fatal(err)
	}
	return out
}

// BenchmarkTrappedCall measures, in one run and with one C child
// (testdata/callloop.c), the floor of a trapped call (serveFloor), a
// null call through the gateway (identification, namespace lookup,
// dispatch, an engine's lookup of a key no set has, answer), a semop and
// a msgsnd/msgrcv served by the engines, and reports each against the
// floor: the figures issue 12 sets bounds on (null ≤ 1.2x, semop and
// msg ≤ 1.5x). Native semop and msg are measured too, for scale.
//
//	go test -run XXX -bench TrappedCall -benchtime 40000x -count 5 ./shim/gateway
func BenchmarkTrappedCall(b *testing.B) {
	bin := buildC(b, "testdata/callloop.c")
	n := strconv.Itoa(max(b.N, 2000))
	ns := func(out []byte) float64 {
		var v float64
		if _, err := fmt.Sscan(string(out), &v); err != nil {
			b.Fatalf("child output %q: %v", out, err)
		}
		return v
	}
	floor := ns(serveFloor(b, bin, "null", n))
	null := ns(serve(b, harness.NewEnginesByInode(), bin, "null", n))
	semop := ns(serve(b, harness.NewEnginesByInode(), bin, "semop", n))
	msg := ns(serve(b, harness.NewEnginesByInode(), bin, "msg", n))
	for _, call := range []string{"semop", "msg"} {
		out, err := harness.NativeCommand(bin, call, n).Output()
		if err != nil {
			b.Skipf("native run: %v\n%s", err, out)
		}
		b.ReportMetric(ns(out), "native-"+call+"-ns/call")
	}
	b.ReportMetric(floor, "floor-ns/call")
	b.ReportMetric(null, "null-ns/call")
	b.ReportMetric(semop, "semop-ns/call")
	b.ReportMetric(msg, "msg-ns/call")
	b.ReportMetric(null/floor, "null/floor")
	b.ReportMetric(semop/floor, "semop/floor")
	b.ReportMetric(msg/floor, "msg/floor")
}

// BenchmarkTrappedScaling measures throughput with K = 1, 2, 4 processes
// each doing semop pairs on its own set, in one IPC namespace and under
// one listener (as the processes of one container are): natively, under
// the minimal supervisor (serveFloor, which answers 0 without an
// engine) and under the gateway (one receiver per listener, the default,
// and two), in one run. Times are per call of all K
// processes (1/throughput): the gain of K over one is the K=1 time over
// the K time.
//
//	go test -run XXX -bench TrappedScaling -benchtime 20000x -count 3 ./shim/gateway
func BenchmarkTrappedScaling(b *testing.B) {
	bin := buildC(b, "testdata/callloop.c")
	n := strconv.Itoa(max(b.N, 2000))
	ns := func(out []byte) float64 {
		var v float64
		if _, err := fmt.Sscan(string(out), &v); err != nil {
			b.Fatalf("child output %q: %v", out, err)
		}
		return v
	}
	for _, k := range []string{"1", "2", "4"} {
		out, err := harness.NativeCommand(bin, "semop", n, k).Output()
		if err != nil {
			b.Skipf("native run: %v\n%s", err, out)
		}
		nat := ns(out)
		floor := ns(serveFloor(b, bin, "semop", n, k))
		gw := ns(serve(b, harness.NewEnginesByInode(), bin, "semop", n, k))
		two, _ := serveWith(b, harness.NewEnginesByInode(), func(g *gateway.Gateway) { g.Receivers = 2 }, bin, "semop", n, k)
		gw2 := ns(two)
		if testing.Verbose() {
			// The variants that could let one listener scale.
			for _, v := range []struct {
				r    int
				sync bool
			}{{2, true}, {1, false}, {2, false}} {
				t := ns(serveFloorWith(b, v.r, v.sync, bin, "semop", n, k))
				b.ReportMetric(t, fmt.Sprintf("floor-r%d-sync=%v-ns/call-k%s", v.r, v.sync, k))
			}
		}
		b.ReportMetric(nat, "native-ns/call-k"+k)
		b.ReportMetric(floor, "floor-ns/call-k"+k)
		b.ReportMetric(gw, "gateway-ns/call-k"+k)
		b.ReportMetric(gw2, "gateway-2recv-ns/call-k"+k)
	}
}
