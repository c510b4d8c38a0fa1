package serve

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
)

func testSource(inos ...uint64) Source {
	return func() control.Snapshot {
		s := control.Snapshot{Shim: control.Shim{Pid: 42}}
		for _, ino := range inos {
			l := control.Limits{SemMSL: 10, SemMNS: 100, SemOPM: 5, SemMNI: 8, MsgMax: 8192, MsgMNB: 1024, MsgMNI: 4}
			s.Namespaces = append(s.Namespaces, control.NamespaceState{Inode: ino, Pod: &control.Pod{Name: "p", Namespace: "ns"}, Limits: l, Bounds: control.BoundsOf(l),
				Usage: control.Usage{Sets: 1, Semaphores: 3, Queues: 2, Messages: 5, Bytes: 50, Waiters: 2, SemopWaiters: 1, MsgrcvWaiters: 1}})
		}
		return s
	}
}

func TestObserveReplyAllocationFree(t *testing.T) {
	m := NewMetrics(testSource(7))
	r := &gateway.Request{Sysno: gateway.SysSemop, Task: &gateway.Task{IPCNS: 7}}
	m.ObserveReply(r, 0, time.Microsecond) // makes the namespace's counters
	if n := testing.AllocsPerRun(1000, func() { m.ObserveReply(r, unix.EAGAIN, 3*time.Microsecond) }); n != 0 {
		t.Fatalf("ObserveReply allocates %v times per call", n)
	}
}

func BenchmarkObserveReply(b *testing.B) {
	m := NewMetrics(testSource(7))
	r := &gateway.Request{Sysno: gateway.SysSemop, Task: &gateway.Task{IPCNS: 7}}
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveReply(r, 0, 3*time.Microsecond)
	}
}

func TestMetricsExport(t *testing.T) {
	m := NewMetrics(testSource(7))
	r := &gateway.Request{Sysno: gateway.SysSemop, Task: &gateway.Task{IPCNS: 7}}
	m.ObserveReply(r, 0, 3*time.Microsecond)
	m.ObserveReply(r, 0, 30*time.Microsecond)
	m.ObserveReply(r, unix.EAGAIN, time.Microsecond)
	// A namespace that is gone is dropped at the next scrape.
	m.ObserveReply(&gateway.Request{Sysno: gateway.SysMsgget, Task: &gateway.Task{IPCNS: 9}}, 0, time.Microsecond)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	want := `
containerd_shim_ipc_calls_total{errno="EAGAIN",ipc_ns="7",pod="p",pod_namespace="ns",syscall="semop"} 1
containerd_shim_ipc_calls_total{errno="OK",ipc_ns="7",pod="p",pod_namespace="ns",syscall="semop"} 2
containerd_shim_ipc_waiters{ipc_ns="7",kind="msgrcv",pod="p",pod_namespace="ns"} 1
containerd_shim_ipc_waiters{ipc_ns="7",kind="msgsnd",pod="p",pod_namespace="ns"} 0
containerd_shim_ipc_waiters{ipc_ns="7",kind="semop",pod="p",pod_namespace="ns"} 1
containerd_shim_ipc_bound{ipc_ns="7",pod="p",pod_namespace="ns",resource="messages"} 4096
containerd_shim_ipc_bound{ipc_ns="7",pod="p",pod_namespace="ns",resource="msg_bytes"} 4096
containerd_shim_ipc_bound{ipc_ns="7",pod="p",pod_namespace="ns",resource="queues"} 4
containerd_shim_ipc_bound{ipc_ns="7",pod="p",pod_namespace="ns",resource="semaphores"} 80
containerd_shim_ipc_bound{ipc_ns="7",pod="p",pod_namespace="ns",resource="sets"} 8
containerd_shim_ipc_bound{ipc_ns="7",pod="p",pod_namespace="ns",resource="state_bytes"} 143616
containerd_shim_ipc_call_duration_seconds_bucket{ipc_ns="7",pod="p",pod_namespace="ns",slept="false",syscall="semop",le="5e-06"} 2
containerd_shim_ipc_call_duration_seconds_count{ipc_ns="7",pod="p",pod_namespace="ns",slept="false",syscall="semop"} 3
`
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		expfmt.MetricFamilyToText(&b, mf)
	}
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		if !strings.Contains(b.String(), l+"\n") {
			t.Errorf("no %s in\n%s", l, b.String())
		}
	}
	if strings.Contains(b.String(), `ipc_ns="9"`) {
		t.Error("a namespace that is gone is exported")
	}
	if st := (*m.nss.Load())[9]; st != nil {
		t.Fatal("counters of a namespace that is gone were kept")
	}
}

func TestServerClient(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/x.sock"
	m := NewMetrics(testSource(7))
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	var got []control.Query
	src := testSource(7, 8)
	srv, err := Listen(path, func(q control.Query) (control.Snapshot, error) { got = append(got, q); return src(), nil }, reg)
	if err != nil {
		t.Fatal(err)
	}
	socks, err := control.Sockets(dir)
	if err != nil || len(socks) != 1 || socks[0] != path {
		t.Fatalf("sockets %v %v", socks, err)
	}
	c := control.NewClient(path, time.Second)
	s, err := c.State()
	if err != nil || s.Shim.Pid != 42 || len(s.Namespaces) != 2 || s.Namespaces[1].Inode != 8 || s.Namespaces[0].Bounds.MaxSets != 8 {
		t.Fatalf("state %+v %v", s, err)
	}
	if _, err := c.StateQuery(control.Query{NS: 8, Set: 0, HasSet: true, Offset: 5, Limit: 7}); err != nil {
		t.Fatal(err)
	}
	if want := []control.Query{{}, {NS: 8, Set: 0, HasSet: true, Offset: 5, Limit: 7}}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("queries %+v, want %+v", got, want)
	}
	if _, err := c.Get("/v1/state?limit=-1"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a negative limit: %v", err)
	}
	b, err := c.Get("/metrics")
	if err != nil || !strings.Contains(string(b), `containerd_shim_ipc_namespaces{shim_pid="42"} 1`) {
		t.Fatalf("metrics %s %v", b, err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if socks, _ := control.Sockets(dir); len(socks) != 0 {
		t.Fatalf("socket left after Close: %v", socks)
	}
}
