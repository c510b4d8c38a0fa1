package task

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control/serve"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
)

// benchEngines makes a namespace of sets sets of nsems semaphores each,
// with limits that let it (semmsl and semmni at Linux's defaults, semmns
// unbounded) and one semop with SEM_UNDO on each set's last semaphore,
// so that every set has a sempid, an otime and an undo entry. It returns
// the namespace and its first set's id.
func benchEngines(tb testing.TB, sets, nsems int) (*gateway.Engines, int32) {
	tb.Helper()
	l := ipcns.DefaultLimits()
	l.SemMSL, l.SemMNS, l.SemMNI = 32000, 1<<30, 32000
	e := gateway.NewEngines("bench", l)
	c := &ipcns.Caller{Creds: ipcns.RootCreds(), Pid: ipcns.NewPid(ipcns.NewPidNamespace(nil, 1), 1)}
	var first int32
	for i := range sets {
		id, err := e.Sem().Semget(c, ipcns.IPCPrivate, nsems, 0o600)
		if err != nil {
			tb.Fatalf("set %d: %v", i, err)
		}
		if i == 0 {
			first = id
		}
		op := &semengine.Op{SemID: id, Sops: []semengine.Sembuf{{Num: uint16(nsems - 1), Op: 1, Flg: semengine.SemUndo}}}
		if err := e.Sem().Semop(context.Background(), c, op); err != nil {
			tb.Fatalf("semop on set %d: %v", i, err)
		}
	}
	return e, first
}

// BenchmarkHostState is what a host-side read costs against what the
// namespace holds: the default /v1/state answer (summaries) built and
// encoded, one set's page of semaphores (?set=ID, the default limit and
// the largest), and a metrics scrape (counts only). docs/bench-host.md
// records the figures:
//
//	go test -run '^$' -bench HostState -benchtime 5x ./shim/task/
func BenchmarkHostState(b *testing.B) {
	for _, sc := range [][2]int{{1, 1}, {1, 32000}, {1000, 1}, {32000, 1}, {100, 32000}} {
		e, first := benchEngines(b, sc[0], sc[1])
		state := func(b *testing.B, q control.Query) {
			b.ReportAllocs()
			for b.Loop() {
				st := buildNamespaceState(1, e, nil, nil, nil, time.Now(), q)
				if err := json.NewEncoder(io.Discard).Encode(control.Snapshot{Namespaces: []control.NamespaceState{st}}); err != nil {
					b.Fatal(err)
				}
			}
		}
		name := fmt.Sprintf("sets=%d/sems=%d/", sc[0], sc[1])
		b.Run(name+"state", func(b *testing.B) { state(b, control.Query{}) })
		b.Run(name+"state-max", func(b *testing.B) { state(b, control.Query{Limit: control.MaxLimit}) })
		b.Run(name+"set-page", func(b *testing.B) { state(b, control.Query{Set: first, HasSet: true}) })
		b.Run(name+"set-page-max", func(b *testing.B) { state(b, control.Query{Set: first, HasSet: true, Limit: control.MaxLimit}) })
		b.Run(name+"metrics", func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(serve.NewMetrics(func() control.Snapshot {
				return control.Snapshot{Namespaces: []control.NamespaceState{
					buildNamespaceState(1, e, nil, nil, nil, time.Now(), control.Query{CountsOnly: true})}}
			}))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
