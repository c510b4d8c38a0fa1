package serve

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
)

// Metrics counts the shim's trapped calls per engine namespace (it is the
// gateway's Observer) and exports them, with the namespaces' state from a
// Source, as a prometheus.Collector. It reads only the namespaces'
// counts (Usage): a scrape costs a bounded number of series per
// namespace, whatever the namespace holds.
//
// The trapped path pays three atomic adds and a lookup in a copy-on-write
// map: no lock, no allocation, no label formatting. Labels are made at
// scrape time.
type Metrics struct {
	src Source

	mu  sync.Mutex // serialises writers of nss
	nss atomic.Pointer[map[uint64]*nsStats]

	dCalls, dLatency, dWaiters, dObjects, dSems, dMsgs, dBytes, dReserved, dUndo, dLimit, dBound *prometheus.Desc
	dNamespaces, dSignals                                                                        *prometheus.Desc
}

const (
	nSys   = int(gateway.SysNSChange) + 1
	nErrno = 134 // errnos 0..133 (EHWPOISON); larger ones count as 133
)

// latencyBounds are the histogram's upper bounds in nanoseconds: a trapped
// call answered at once takes a few microseconds, one that sleeps as long
// as it sleeps.
var latencyBounds = [...]int64{1e3, 2.5e3, 5e3, 10e3, 25e3, 50e3, 100e3, 250e3, 500e3, 1e6, 10e6, 100e6, 1e9, 10e9}

type histogram struct {
	counts [len(latencyBounds) + 1]atomic.Uint64
	sumNs  atomic.Uint64
}

type nsStats struct {
	calls [nSys][nErrno]atomic.Uint64
	// lat[sys][slept]
	lat [nSys][2]histogram
}

// NewMetrics returns the metrics of the namespaces src reports.
func NewMetrics(src Source) *Metrics {
	m := &Metrics{src: src}
	empty := map[uint64]*nsStats{}
	m.nss.Store(&empty)
	ns := []string{"ipc_ns", "pod", "pod_namespace"}
	with := func(extra ...string) []string { return append(append([]string(nil), ns...), extra...) }
	const p = "containerd_shim_ipc_"
	m.dCalls = prometheus.NewDesc(p+"calls_total", "Trapped System V IPC calls answered, by syscall and errno (OK for success).", with("syscall", "errno"), nil)
	m.dLatency = prometheus.NewDesc(p+"call_duration_seconds", "Time from a trapped call's dispatch to its answer; slept=true for calls that waited in the engine (their time includes the wait).", with("syscall", "slept"), nil)
	m.dWaiters = prometheus.NewDesc(p+"waiters", "Processes asleep in the engine, by call (semop, msgsnd, msgrcv).", with("kind"), nil)
	m.dObjects = prometheus.NewDesc(p+"objects", "IPC objects, by kind (sem_set, msg_queue).", with("kind"), nil)
	m.dSems = prometheus.NewDesc(p+"semaphores", "Semaphores in all sets.", ns, nil)
	m.dMsgs = prometheus.NewDesc(p+"queued_messages", "Messages queued in all queues.", ns, nil)
	m.dBytes = prometheus.NewDesc(p+"queued_bytes", "Message bytes queued in all queues.", ns, nil)
	m.dReserved = prometheus.NewDesc(p+"reserved_bytes", "Payload room the queues hold from the namespace's budget (msgmni x msgmnb).", ns, nil)
	m.dUndo = prometheus.NewDesc(p+"undo_entries", "SEM_UNDO entries (process, set).", ns, nil)
	m.dLimit = prometheus.NewDesc(p+"limit", "The namespace's IPC sysctls as enforced (semmsl, semmns, semopm, semmni, msgmax, msgmnb, msgmni).", with("sysctl"), nil)
	m.dBound = prometheus.NewDesc(p+"bound", "What the namespace's limits let its pod hold in the shim (sets, semaphores, queues, msg_bytes, messages, state_bytes: the estimated worst-case memory).", with("resource"), nil)
	m.dNamespaces = prometheus.NewDesc(p+"namespaces", "Engine namespaces served by the shim.", []string{"shim_pid"}, nil)
	m.dSignals = prometheus.NewDesc(p+"gateway_events_total", "Gateway signal events: interrupted blocked calls, restarts answered EINTR, answers refused by a task that left.", []string{"shim_pid", "event"}, nil)
	return m
}

// ObserveReply counts one answered call (gateway.Observer).
func (m *Metrics) ObserveReply(r *gateway.Request, errno unix.Errno, elapsed time.Duration) {
	st := m.stats(r.Task.IPCNS)
	sys := int(r.Sysno)
	if sys < 0 || sys >= nSys {
		sys = 0
	}
	e := int(errno)
	if e >= nErrno {
		e = nErrno - 1
	}
	st.calls[sys][e].Add(1)
	slept := 0
	if r.Slept() {
		slept = 1
	}
	h := &st.lat[sys][slept]
	ns := int64(elapsed)
	b := 0
	for b < len(latencyBounds) && ns > latencyBounds[b] {
		b++
	}
	h.counts[b].Add(1)
	h.sumNs.Add(uint64(max(ns, 0)))
}

func (m *Metrics) stats(ino uint64) *nsStats {
	if st := (*m.nss.Load())[ino]; st != nil {
		return st
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.nss.Load()
	if st := old[ino]; st != nil {
		return st
	}
	st := new(nsStats)
	nw := make(map[uint64]*nsStats, len(old)+1)
	for k, v := range old {
		nw[k] = v
	}
	nw[ino] = st
	m.nss.Store(&nw)
	return st
}

// prune forgets the counters of namespaces that were in seen but are
// gone.
func (m *Metrics) prune(seen map[uint64]*nsStats, live map[uint64]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.nss.Load()
	nw := make(map[uint64]*nsStats, len(old))
	for k, v := range old {
		if live[k] || seen[k] == nil {
			nw[k] = v
		}
	}
	if len(nw) != len(old) {
		m.nss.Store(&nw)
	}
}

// Describe sends the descriptors (prometheus.Collector).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.dCalls, m.dLatency, m.dWaiters, m.dObjects, m.dSems, m.dMsgs, m.dBytes,
		m.dReserved, m.dUndo, m.dLimit, m.dBound, m.dNamespaces, m.dSignals} {
		ch <- d
	}
}

// Collect sends the current values (prometheus.Collector).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	stats := *m.nss.Load() // before src: a namespace made meanwhile is kept
	snap := m.src()
	shim := strconv.Itoa(snap.Shim.Pid)
	ch <- prometheus.MustNewConstMetric(m.dNamespaces, prometheus.GaugeValue, float64(len(snap.Namespaces)), shim)
	ch <- prometheus.MustNewConstMetric(m.dSignals, prometheus.CounterValue, float64(snap.Shim.Interrupted), shim, "interrupted")
	ch <- prometheus.MustNewConstMetric(m.dSignals, prometheus.CounterValue, float64(snap.Shim.Restarts), shim, "restart")
	ch <- prometheus.MustNewConstMetric(m.dSignals, prometheus.CounterValue, float64(snap.Shim.Refused), shim, "refused")
	live := map[uint64]bool{}
	for i := range snap.Namespaces {
		n := &snap.Namespaces[i]
		live[n.Inode] = true
		var pod, podNS string
		if n.Pod != nil {
			pod, podNS = n.Pod.Name, n.Pod.Namespace
		}
		lv := []string{strconv.FormatUint(n.Inode, 10), pod, podNS}
		with := func(extra ...string) []string { return append(append([]string(nil), lv...), extra...) }
		gauge := func(d *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, with(extra...)...)
		}
		u := &n.Usage
		gauge(m.dWaiters, float64(u.SemopWaiters), "semop")
		gauge(m.dWaiters, float64(u.MsgsndWaiters), "msgsnd")
		gauge(m.dWaiters, float64(u.MsgrcvWaiters), "msgrcv")
		gauge(m.dObjects, float64(u.Sets), "sem_set")
		gauge(m.dObjects, float64(u.Queues), "msg_queue")
		gauge(m.dSems, float64(u.Semaphores))
		gauge(m.dMsgs, float64(u.Messages))
		gauge(m.dBytes, float64(u.Bytes))
		gauge(m.dReserved, float64(u.ReservedBytes))
		gauge(m.dUndo, float64(u.UndoEntries))
		l := &n.Limits
		for _, kv := range []struct {
			k string
			v int
		}{{"semmsl", l.SemMSL}, {"semmns", l.SemMNS}, {"semopm", l.SemOPM}, {"semmni", l.SemMNI},
			{"msgmax", l.MsgMax}, {"msgmnb", l.MsgMNB}, {"msgmni", l.MsgMNI}} {
			gauge(m.dLimit, float64(kv.v), kv.k)
		}
		b := &n.Bounds
		for _, kv := range []struct {
			k string
			v int64
		}{{"sets", int64(b.MaxSets)}, {"semaphores", b.MaxSemaphores}, {"queues", int64(b.MaxQueues)},
			{"msg_bytes", b.MaxMsgBytes}, {"messages", b.MaxMessages}, {"state_bytes", b.MaxStateBytes}} {
			gauge(m.dBound, float64(kv.v), kv.k)
		}
		st := stats[n.Inode]
		if st == nil {
			continue
		}
		for sys := 1; sys < nSys; sys++ {
			name := gateway.Sysno(sys).String()
			for e := range st.calls[sys] {
				if v := st.calls[sys][e].Load(); v > 0 {
					ch <- prometheus.MustNewConstMetric(m.dCalls, prometheus.CounterValue, float64(v), with(name, errnoName(e))...)
				}
			}
			for slept := range st.lat[sys] {
				h := &st.lat[sys][slept]
				var count uint64
				buckets := make(map[float64]uint64, len(latencyBounds))
				for i, bound := range latencyBounds {
					count += h.counts[i].Load()
					buckets[float64(bound)/1e9] = count
				}
				count += h.counts[len(latencyBounds)].Load()
				if count == 0 {
					continue
				}
				ch <- prometheus.MustNewConstHistogram(m.dLatency, count, float64(h.sumNs.Load())/1e9, buckets,
					with(name, strconv.FormatBool(slept == 1))...)
			}
		}
	}
	m.prune(stats, live)
}

func errnoName(e int) string {
	if e == 0 {
		return "OK"
	}
	if n := unix.ErrnoName(unix.Errno(e)); n != "" {
		return n
	}
	return strconv.Itoa(e)
}
