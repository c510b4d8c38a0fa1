package task

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control/serve"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
)

// The shim's control endpoint (shim/control): what ipcctl and the
// metrics read. The snapshot reads the engines and, from each
// container's record, its CRI identity and pid namespace.

// CRI annotations of a container's OCI spec.
const (
	annContainerType = "io.kubernetes.cri.container-type"
	annContainerName = "io.kubernetes.cri.container-name"
	annSandboxID     = "io.kubernetes.cri.sandbox-id"
	annSandboxName   = "io.kubernetes.cri.sandbox-name"
	annSandboxNS     = "io.kubernetes.cri.sandbox-namespace"
	annSandboxUID    = "io.kubernetes.cri.sandbox-uid"
)

// ctrMeta is what the control endpoint shows of a container.
type ctrMeta struct {
	name    string
	sandbox bool
	pod     *control.Pod
	pidns   uint64
	initPid int
}

// controlState is the control endpoint's server and metrics; what it
// shows of each container is in the container's record (EngineTable).
type controlState struct {
	started time.Time
	cns     string
	srv     *serve.Server
	metrics *serve.Metrics
}

// startControl opens the control socket next to the listener socket and
// installs the metrics observer. A failure is logged, not fatal: the
// containers run without the host view.
func (s *Service) startControl(sd shutdown.Service) {
	cns, _ := namespaces.Namespace(s.ctx)
	s.ctl = &controlState{started: time.Now(), cns: cns}
	s.ctl.metrics = serve.NewMetrics(s.metricsSnapshot)
	s.gw.SetObserver(s.ctl.metrics)
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.ctl.metrics)
	srv, err := serve.Listen(control.SocketPath(s.sock), s.snapshot, reg)
	if err != nil {
		log.G(s.ctx).WithError(err).Warn("io.containerd.ipc.v2: no control socket: ipcctl and metrics will not see this shim")
		return
	}
	s.ctl.srv = srv
	log.G(s.ctx).Infof("control socket %s", srv.Path())
	sd.RegisterCallback(func(context.Context) error { return srv.Close() })
}

// metaOf returns a container's CRI identity from its spec's annotations.
func metaOf(sp *specs.Spec) ctrMeta {
	if sp == nil {
		return ctrMeta{}
	}
	a := sp.Annotations
	m := ctrMeta{name: a[annContainerName], sandbox: a[annContainerType] == "sandbox"}
	if a[annSandboxName] != "" {
		m.pod = &control.Pod{Name: a[annSandboxName], Namespace: a[annSandboxNS], UID: a[annSandboxUID], SandboxID: a[annSandboxID]}
	}
	return m
}

// noteProcess records the pid namespace of a served process of container
// id (its init or an exec), to tell which container a pid is in.
func (s *Service) noteProcess(id string, pid int) {
	var ino uint64
	if fi, err := os.Stat(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil {
		ino = inodeOf(fi)
	}
	s.ns.NoteProcess(id, pid, ino)
}

// snapshot builds the control endpoint's view of q (serve.StateSource).
// Every engine read copies a bounded page under the engine's locks; none
// is held once it returns, so the answer is encoded lock-free.
func (s *Service) snapshot(q control.Query) (control.Snapshot, error) {
	// Exits and signals the kernel has reported take effect first (an
	// exited process's SEM_UNDO, a signalled sleeper leaving its queue).
	s.gw.SyncEvents()
	snap := control.Snapshot{Taken: time.Now(), Shim: control.Shim{Pid: os.Getpid()}, Namespaces: []control.NamespaceState{}}
	snap.Shim.Socket = control.SocketPath(s.sock)
	snap.Shim.Interrupted = s.gw.Stats.Interrupted.Load()
	snap.Shim.Restarts = s.gw.Stats.Restarts.Load()
	snap.Shim.Refused = s.gw.Stats.Refused.Load()
	if s.ctl != nil {
		snap.Shim.ContainerdNamespace, snap.Shim.Started = s.ctl.cns, s.ctl.started
	}
	type nsRef struct {
		ino     uint64
		e       *servedNamespace
		members []string
	}
	n := s.ns
	n.mu.RLock()
	refs := make([]nsRef, 0, len(n.byIno))
	for ino, e := range n.byIno {
		if q.NS != 0 && ino != q.NS {
			continue
		}
		r := nsRef{ino: ino, e: e}
		for id := range e.members {
			r.members = append(r.members, id)
		}
		refs = append(refs, r)
	}
	n.mu.RUnlock()
	if q.NS != 0 && len(refs) == 0 {
		return snap, fmt.Errorf("no engine namespace of IPC namespace inode %d", q.NS)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].ino < refs[j].ino })

	ctrs, pidns := s.ns.containerMetas()
	now := time.Now()
	for _, r := range refs {
		snap.Namespaces = append(snap.Namespaces, buildNamespaceState(r.ino, r.e.eng, r.members, ctrs, pidns, now, q))
	}
	return snap, nil
}

// metricsSnapshot is the metrics' Source: the counts of snapshot, no
// lists.
func (s *Service) metricsSnapshot() control.Snapshot {
	snap, _ := s.snapshot(control.Query{CountsOnly: true})
	return snap
}

// buildNamespaceState reads one engine namespace as q asks. Its cost is
// O(sets + queues) for the counts and headers, plus what the query's
// pages hold; it never reads every semaphore.
func buildNamespaceState(ino uint64, eng *gateway.Engines, members []string, ctrs map[string]ctrMeta, pidns map[uint64]string, now time.Time, q control.Query) control.NamespaceState {
	sem, msg := eng.Sem(), eng.Msg()
	l := sem.Resources().Limits()
	out := control.NamespaceState{Inode: ino, Containers: []control.Container{}, SemSets: []control.SemSet{},
		Queues: []control.Queue{}, Waiters: []control.Waiter{}, Undo: []control.Undo{}}
	out.Limits = control.Limits{SemMSL: l.SemMSL, SemMNS: l.SemMNS, SemOPM: l.SemOPM, SemMNI: l.SemMNI,
		MsgMax: l.MsgMax, MsgMNB: l.MsgMNB, MsgMNI: l.MsgMNI}
	out.Bounds = control.BoundsOf(out.Limits)
	sort.Slice(members, func(i, j int) bool {
		a, b := ctrs[members[i]], ctrs[members[j]]
		if a.sandbox != b.sandbox {
			return a.sandbox
		}
		return members[i] < members[j]
	})
	for _, id := range members {
		m := ctrs[id]
		out.Containers = append(out.Containers, control.Container{ID: id, Name: m.name, Sandbox: m.sandbox, PidNS: m.pidns, InitPid: m.initPid})
		if out.Pod == nil && m.pod != nil {
			out.Pod = m.pod
		}
	}

	// Counts: O(1) for the semaphores, one walk of the queues.
	ss, ms := sem.Summary(), msg.Summary()
	u := &out.Usage
	u.Sets, u.Semaphores, u.UndoEntries = ss.Sets, ss.Sems, ss.UndoEntries
	u.Queues, u.Messages, u.Bytes, u.ReservedBytes = ms.Queues, ms.Messages, ms.Bytes, ms.Reserved
	u.SemopWaiters, u.MsgsndWaiters, u.MsgrcvWaiters = ss.Waiters, ms.Senders, ms.Receivers
	u.Waiters = ss.Waiters + ms.Senders + ms.Receivers
	if q.CountsOnly {
		return out
	}

	limit := q.Max()
	pid := func(p *ipcns.Pid) control.Pid {
		if p == nil {
			return control.Pid{}
		}
		root := p.Namespace()
		for root.Parent() != nil {
			root = root.Parent()
		}
		return control.Pid{Host: p.In(root), Container: p.In(p.Namespace()), ContainerID: pidns[p.Namespace().ID]}
	}
	pidp := func(p *ipcns.Pid) *control.Pid {
		if p == nil {
			return nil
		}
		v := pid(p)
		return &v
	}
	perm := func(p ipcns.Perm) control.Perm {
		return control.Perm{Key: p.Key, UID: p.UID, GID: p.GID, CUID: p.CUID, CGID: p.CGID, Mode: p.Mode & 0o777}
	}
	semKey := func(id int32) int32 {
		if s, err := sem.Registry().Lookup(id); err == nil {
			return s.Perm().Key
		}
		return 0
	}
	msgKey := func(id int32) int32 {
		if q, err := msg.Registry().Lookup(id); err == nil {
			return q.Perm().Key
		}
		return 0
	}
	header := func(h semengine.SetHeader) control.SemSet {
		return control.SemSet{ID: h.ID, Perm: perm(h.Perm), Otime: h.Otime, Ctime: h.Ctime, Nsems: h.Nsems, Waiters: h.Waiters, Undos: h.Undos}
	}
	truncated := func(name string, from, listed, total int) {
		if from+listed < total {
			out.Truncated = append(out.Truncated, name)
		}
	}

	// Sets: one set's page when asked for, else the headers.
	adjLo, adjN := 0, control.InlineSems
	if q.HasSet {
		if h, page, err := sem.SetPage(q.Set, q.Offset, limit); err == nil {
			set := header(h)
			set.SemsOffset = min(q.Offset, h.Nsems)
			set.Sems = make([]control.Sem, 0, len(page))
			for _, sm := range page {
				set.Sems = append(set.Sems, control.Sem{Val: sm.Val, Pid: pidp(sm.Pid), Ncnt: sm.Ncnt, Zcnt: sm.Zcnt})
			}
			out.SemSets = append(out.SemSets, set)
			adjLo, adjN = set.SemsOffset, len(page)
		}
	} else {
		hs, total := sem.SetHeaders(q.Offset, limit)
		out.SemSets = make([]control.SemSet, 0, len(hs))
		for _, h := range hs {
			out.SemSets = append(out.SemSets, header(h))
		}
		truncated("sem_sets", q.Offset, len(hs), total)
	}

	qoff := q.Offset
	if q.HasSet {
		qoff = 0
	}
	qs, total := msg.QueuesN(qoff, limit)
	out.Queues = make([]control.Queue, 0, len(qs))
	for _, qi := range qs {
		out.Queues = append(out.Queues, control.Queue{ID: qi.ID, Perm: perm(qi.Perm), Stime: qi.Stime, Rtime: qi.Rtime, Ctime: qi.Ctime,
			Messages: qi.Qnum, Bytes: qi.Cbytes, Qbytes: qi.Qbytes, Lspid: pidp(qi.Lspid), Lrpid: pidp(qi.Lrpid),
			Senders: qi.Senders, Receivers: qi.Receivers, Reserved: qi.Reserved})
	}
	truncated("msg_queues", qoff, len(qs), total)

	sws, semWaiters := sem.WaitersN(limit)
	for _, w := range sws {
		cw := control.Waiter{Kind: "semop", ID: w.SemID, Key: semKey(w.SemID), Pid: pid(w.Pid), Blocking: w.Blocking,
			Since: w.Since, Seconds: now.Sub(w.Since).Seconds()}
		for _, op := range w.Sops[:min(len(w.Sops), control.InlineSems)] {
			cw.Sops = append(cw.Sops, control.Sembuf{Num: op.Num, Op: op.Op, Flg: op.Flg})
		}
		if len(w.Sops) > control.InlineSems {
			cw.Nsops = len(w.Sops)
		}
		out.Waiters = append(out.Waiters, cw)
	}
	mws, msgWaiters := msg.WaitersN(limit - len(out.Waiters))
	for _, w := range mws {
		cw := control.Waiter{Kind: "msgrcv", ID: w.MsqID, Key: msgKey(w.MsqID), Pid: pid(w.Pid), Thread: pidp(w.Thread),
			Type: w.Type, Mode: w.Mode, Size: w.Size, Since: w.Since, Seconds: now.Sub(w.Since).Seconds()}
		if w.Send {
			cw.Kind = "msgsnd"
		}
		out.Waiters = append(out.Waiters, cw)
	}
	truncated("waiters", 0, len(out.Waiters), semWaiters+msgWaiters)

	// Undo entries: those of the asked-for set with the adjustments of
	// its page, else every set's with their first InlineSems. The
	// entries times the adjustments each stay within MaxLimit×InlineSems.
	var uns []semengine.UndoInfo
	undoTotal := 0
	if q.HasSet {
		uns, undoTotal = sem.SetUndos(q.Set, min(limit, max(1, control.MaxLimit*control.InlineSems/max(adjN, 1))), adjLo, adjN)
	} else {
		uns, undoTotal = sem.UndosN(limit, 0, control.InlineSems)
	}
	for _, un := range uns {
		out.Undo = append(out.Undo, control.Undo{SemID: un.SemID, Key: semKey(un.SemID), Pid: pid(un.Pid),
			Adj: un.Adj, AdjOffset: un.AdjOffset, AdjTruncated: un.AdjOffset+len(un.Adj) < un.Nsems})
	}
	truncated("undo", 0, len(out.Undo), undoTotal)
	return out
}
