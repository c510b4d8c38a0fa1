package task

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/memcharge"
	"golang.org/x/sys/unix"
)

// EngineTable maps containers to engine namespaces and serves the gateway's
// calls from them. An engine namespace stands for one kernel IPC
// namespace (keyed by its inode, as the gateway identifies callers): the
// containers of a pod share the sandbox's, a container started with its
// own IPC namespace gets a fresh one, an exec'd process is in its
// container's. A namespace is freed when the last container attached to
// it is deleted.
//
// Locks: a trapped call's lookup (Handle, Peek, Known, Len, Exit) takes
// none: it reads served, a snapshot of byIno that every change replaces.
// mu is held only to read and change the maps, never across a blocking
// operation (a ballast's helper round trip, start or end, which can wait
// on a stuck helper for seconds; the /proc sweep): those are decided
// under mu, collected in a deferred and run after it is released, so one
// pod's stuck helper or a namespace's creation slows no other pod's calls
// and no other control call. Order: sweepMu, then mu, then a
// servedNamespace's hostMu. A ballast's lock (held across its round
// trips) is never waited for under mu: only a new ballast's, which no one
// else holds, is taken there (newServedNamespace); deferred work runs
// with none of sweepMu and mu held.
type EngineTable struct {
	// Logf reports namespace life events; nil discards them.
	Logf func(format string, args ...any)
	// OnCreate and OnFree, if set, are called (with mu held, so that a
	// kernel namespace's create and free are seen in order) when an
	// engine namespace of a container is made and freed; they must not
	// block.
	OnCreate, OnFree func(ino uint64)
	// ChargePods makes each engine namespace charge what its objects
	// hold to the memory cgroup of its containers (memcharge).
	ChargePods bool

	// served is byIno as of the last change, read without a lock; the
	// map it points to is never changed (publishLocked replaces it).
	served atomic.Pointer[map[uint64]*servedNamespace]

	// mu protects the fields below and the servedContainer and
	// servedNamespace records (but for what their own comments give to
	// another lock).
	mu    sync.RWMutex
	seq   uint64
	ctrs  map[string]*servedContainer
	byIno map[uint64]*servedNamespace
	// nested holds the ballasts of namespaces not a container's, by the
	// memory cgroup (cgroup.procs file) of the processes that made them;
	// nestedCount counts those namespaces (MaxNested), and those being
	// made (in making).
	nested      map[string]*memcharge.Ballast
	nestedUsers map[string]int // nested namespaces using each of nested, and those being made
	nestedCount int
	nextSweep   int // nestedCount at which the next sweep runs
	// making holds the namespaces not a container's being made (outside
	// mu: their first charge is a helper round trip); the channel is
	// closed when it is made or refused. Other callers in the namespace
	// wait for it, callers in others do not.
	making map[uint64]chan struct{}

	// sweepMu makes one sweep at a time (taken before mu, never under it).
	sweepMu sync.Mutex
}

// deferred is the blocking work a change of the table decided under
// EngineTable.mu: it runs after mu is released.
type deferred struct {
	evicts []eviction
	// free lists engine namespaces dropped: what their queues hold is
	// given back before their ballasts are detached or closed.
	free []*gateway.Engines
	// detach lists namespaces not a container's whose charges leave the
	// shared ballast of their cgroup (SetAccount(nil) waits for their
	// charges in flight).
	detach []*servedNamespace
	close  []*memcharge.Ballast
}

type eviction struct {
	b         *memcharge.Ballast
	container string
}

func (d *deferred) evict(b *memcharge.Ballast, container string) {
	d.evicts = append(d.evicts, eviction{b, container})
}

// run does the work in order: helpers leave cgroups, dropped namespaces
// give back what their queues hold, charges leave shared ballasts, then
// ballasts are closed.
func (d *deferred) run() {
	for _, v := range d.evicts {
		v.b.Evict(v.container)
	}
	for _, e := range d.free {
		e.Free()
	}
	for _, e := range d.detach {
		_ = e.eng.Sem().Resources().SetAccount(nil)
	}
	for _, b := range d.close {
		b.Close()
	}
}

// servedContainer is everything the shim keeps about one container it
// serves, in one record: made by Prepare (Create) or, for another shim's
// container joining, by its first listener (Attach), and dropped by
// Remove (Delete) or its last listener (Release). The in-container view
// (shim/sysvipcfs/view) is keyed by the same id. EngineTable.mu protects
// it.
type servedContainer struct {
	limits ipcns.Limits
	// opts is what spec.Plan found: whether the container's threads' IPC
	// namespaces and ids may be cached. Zero (reread on every call) for
	// another shim's container.
	opts gateway.ListenerOptions
	// meta is its CRI identity and pid namespace, for the control
	// endpoint (control.go).
	meta ctrMeta
	// pidns lists the pid namespaces of its served processes (its
	// init's, and an exec's if different): a pid seen in one is the
	// container's.
	pidns []uint64
	ino   uint64 // 0 until runc sent the container's listener
	seq   uint64 // order of recording: a shared pid namespace is the first's
	// cgroup is the cgroup.procs file of the container's memory cgroup
	// (with ChargePods), read when its first listener came, from the
	// process cgroupPid.
	cgroup    string
	cgroupPid int
	// foreign marks a container of another shim process that joined an
	// IPC namespace this shim serves (its runc was given this shim's
	// socket). This shim never sees its Delete: it is a member while its
	// listeners are served (listeners counts them).
	foreign   bool
	listeners int
}

// servedNamespace is one kernel IPC namespace this shim serves: its
// engines, the limits they were made with, and the containers in it.
// eng, limits and nested are set before it is in EngineTable.byIno and
// never change (a lookup without EngineTable.mu reads eng); the others
// are protected by EngineTable.mu, but for hosts.
type servedNamespace struct {
	eng     *gateway.Engines
	limits  ipcns.Limits
	members map[string]struct{}
	// ballast charges the engines' bytes to the pod's memory cgroup; nil
	// unless EngineTable.ChargePods.
	ballast *memcharge.Ballast
	// nested marks a namespace a process made itself, not a container's;
	// pin is then an O_PATH fd on it, which keeps its inode number from
	// being given to a new namespace (that would inherit these objects)
	// until the engine namespace is freed.
	nested bool
	pin    int
	// nestedKey names the shared ballast (n.nested) a nested namespace
	// charges, "" if none. A nested namespace is a user of that ballast
	// (n.nestedUsers) from before its first charge until it is freed:
	// the ballast is closed with its last user.
	nestedKey string

	// hostMu protects hosts: the containers (in the order they came) and
	// one process of each whose memory cgroup can take the ballast's
	// helper. It is taken under the ballast's lock, and takes no other.
	hostMu sync.Mutex
	hosts  []hostProcess
}

type hostProcess struct {
	container string
	procs     string // the cgroup.procs file of its memory cgroup
	pid       int    // the process procs was read from
}

// host is the namespace's memcharge.Host: the memory cgroups of its
// containers not deleted, earliest first (a pod's sandbox). The helper
// goes to the first that takes it: on cgroup v2 one may be frozen (runc
// pause) or have become a parent cgroup (memcharge.Place.Pid).
func (e *servedNamespace) host() ([]memcharge.Place, error) {
	e.hostMu.Lock()
	defer e.hostMu.Unlock()
	if len(e.hosts) == 0 {
		return nil, errors.New("no container left")
	}
	places := make([]memcharge.Place, len(e.hosts))
	for i, h := range e.hosts {
		places[i] = memcharge.Place{Container: h.container, Procs: h.procs, Pid: h.pid}
	}
	return places, nil
}

func (e *servedNamespace) addHost(container, procs string, pid int) {
	e.hostMu.Lock()
	defer e.hostMu.Unlock()
	for _, h := range e.hosts {
		if h.container == container {
			return
		}
	}
	e.hosts = append(e.hosts, hostProcess{container, procs, pid})
}

func (e *servedNamespace) removeHost(container string) {
	e.hostMu.Lock()
	defer e.hostMu.Unlock()
	for i, h := range e.hosts {
		if h.container == container {
			e.hosts = append(e.hosts[:i], e.hosts[i+1:]...)
			return
		}
	}
}

// NewEngineTable returns an empty mapping.
func NewEngineTable() *EngineTable {
	n := &EngineTable{ctrs: map[string]*servedContainer{}, byIno: map[uint64]*servedNamespace{}, making: map[uint64]chan struct{}{}}
	n.publishLocked()
	return n
}

// publishLocked makes byIno's present content what lookups see. Call it
// (mu held) after changing byIno, before releasing mu.
func (n *EngineTable) publishLocked() {
	m := make(map[uint64]*servedNamespace, len(n.byIno))
	for ino, e := range n.byIno {
		m[ino] = e
	}
	n.served.Store(&m)
}

// snapshot returns the namespaces served as of the last change, without
// a lock: read it, never change it.
func (n *EngineTable) snapshot() map[uint64]*servedNamespace {
	if m := n.served.Load(); m != nil {
		return *m
	}
	return nil
}

// lookup returns the served namespace of kernel IPC namespace ino, or
// nil, without a lock.
func (n *EngineTable) lookup(ino uint64) *servedNamespace {
	return n.snapshot()[ino]
}

func (n *EngineTable) logf(format string, args ...any) {
	if n.Logf != nil {
		n.Logf(format, args...)
	}
}

// Prepare records a trapped container before runc creates it: the
// limits its spec asks for, what its threads' identities may cache, and
// its CRI identity.
func (n *EngineTable) Prepare(id string, l ipcns.Limits, opts gateway.ListenerOptions, meta ctrMeta) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	n.ctrs[id] = &servedContainer{limits: l, opts: opts, meta: meta, seq: n.seq}
}

// ListenerOptions returns what container id's spec lets the gateway cache
// (zero for a container not created through this shim).
func (n *EngineTable) ListenerOptions(id string) gateway.ListenerOptions {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if c := n.ctrs[id]; c != nil {
		return c.opts
	}
	return gateway.ListenerOptions{}
}

// NoteProcess records pidns, the pid namespace (inode) of a served process
// of container id, pid: the first is the container's init.
func (n *EngineTable) NoteProcess(id string, pid int, pidns uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.ctrs[id]
	if c == nil {
		return
	}
	if c.meta.initPid == 0 {
		c.meta.initPid, c.meta.pidns = pid, pidns
	}
	if pidns != 0 && !slices.Contains(c.pidns, pidns) {
		c.pidns = append(c.pidns, pidns)
	}
}

// containerMetas returns a copy of every container's meta, and which
// container each served pid namespace belongs to (the first recorded).
func (n *EngineTable) containerMetas() (map[string]ctrMeta, map[uint64]string) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	metas := make(map[string]ctrMeta, len(n.ctrs))
	owner := map[uint64]string{}
	for id, c := range n.ctrs {
		metas[id] = c.meta
		for _, p := range c.pidns {
			if prev, ok := owner[p]; !ok || n.ctrs[prev].seq > c.seq {
				owner[p] = id
			}
		}
	}
	return metas, owner
}

// Attach binds container id to the kernel IPC namespace ino of its
// process pid (its init, or an exec'd process), making the engine
// namespace if it is the first. It reports whether the namespace is new.
func (n *EngineTable) Attach(id string, ino uint64, pid int) bool {
	// The memory cgroup is read before mu is taken (it reads /proc).
	cgroup := ""
	if n.ChargePods && pid > 0 && n.needsCgroup(id) {
		var err error
		if cgroup, err = memcharge.MemoryCgroup(pid); err != nil {
			n.logf("container %s: memory cgroup of pid %d: %v", id, pid, err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.ctrs[id]
	if m == nil {
		// Not created through this shim's Create: a container of
		// another shim joining one of this shim's IPC namespaces.
		n.seq++
		m = &servedContainer{limits: ipcns.DefaultLimits(), foreign: true, seq: n.seq}
		n.ctrs[id] = m
	}
	if m.foreign {
		m.listeners++
	}
	if m.ino != 0 && m.ino != ino {
		n.logf("container %s: process in IPC namespace %d, container's is %d", id, ino, m.ino)
	}
	if m.ino == 0 {
		m.ino = ino
	}
	e := n.byIno[ino]
	created := e == nil
	if created {
		e = n.newServedNamespace(ino, m.limits)
		n.byIno[ino] = e
		n.publishLocked()
		if n.OnCreate != nil {
			n.OnCreate(ino)
		}
		n.logf("IPC namespace %d: new engine namespace for container %s, limits sem=%s msgmax=%d msgmnb=%d msgmni=%d",
			ino, id, strings.ReplaceAll(m.limits.SemString(), "\t", " "), m.limits.MsgMax, m.limits.MsgMNB, m.limits.MsgMNI)
	} else if e.limits != m.limits {
		n.logf("container %s joins IPC namespace %d whose limits were set by its first container; its own sysctls are not applied", id, ino)
	}
	e.members[id] = struct{}{}
	if m.cgroup == "" && cgroup != "" {
		m.cgroup, m.cgroupPid = cgroup, pid
	}
	if m.cgroup != "" {
		e.addHost(id, m.cgroup, m.cgroupPid)
	}
	return created
}

// needsCgroup reports whether container id's memory cgroup is not known
// yet.
func (n *EngineTable) needsCgroup(id string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	m := n.ctrs[id]
	return m == nil || m.cgroup == ""
}

// newServedNamespace makes the engines of a container's kernel IPC
// namespace ino and, with ChargePods, their ballast. It does not block
// (a ballast starts its helper at its first growth, and a new one has
// nothing to charge): Attach calls it under mu.
func (n *EngineTable) newServedNamespace(ino uint64, l ipcns.Limits) *servedNamespace {
	name := "ipc:" + strconv.FormatUint(ino, 10)
	e := &servedNamespace{eng: gateway.NewEngines(name, l), limits: l, members: map[string]struct{}{}}
	if !n.ChargePods {
		return e
	}
	b, err := memcharge.New(name, e.host, n.Logf)
	if err == nil {
		err = e.eng.Sem().Resources().SetAccount(b)
	}
	if err != nil {
		n.logf("IPC namespace %d: objects not charged to the pod: %v", ino, err)
		return e
	}
	e.ballast = b
	return e
}

// releaseNestedLocked gives back (in d) what nested namespace e held of
// its cgroup's shared ballast, and closes the ballast (in d) with its last
// user: a ballast (memfd, helper) lives only while a namespace uses it.
func (n *EngineTable) releaseNestedLocked(e *servedNamespace, d *deferred) {
	d.detach = append(d.detach, e)
	key := e.nestedKey
	if key == "" {
		return
	}
	e.nestedKey = ""
	if n.nestedUsers[key]--; n.nestedUsers[key] > 0 {
		return
	}
	delete(n.nestedUsers, key)
	if b := n.nested[key]; b != nil {
		d.close = append(d.close, b)
		delete(n.nested, key)
	}
}

// nestedBallastLocked returns the ballast of the namespaces that the
// processes of memory cgroup procs made themselves (unshare -i): one per
// cgroup, so one helper however many namespaces it makes. A new ballast
// is only a memfd (no helper before its first growth).
func (n *EngineTable) nestedBallastLocked(procs string) *memcharge.Ballast {
	if b := n.nested[procs]; b != nil {
		return b
	}
	b, err := memcharge.New("nested", func() ([]memcharge.Place, error) { return []memcharge.Place{{Procs: procs}}, nil }, n.Logf)
	if err != nil {
		n.logf("namespaces made in %s: objects not charged to the pod: %v", procs, err)
		return nil
	}
	if n.nested == nil {
		n.nested = map[string]*memcharge.Ballast{}
		n.nestedUsers = map[string]int{}
	}
	n.nested[procs] = b
	return b
}

// Evict makes container id's memory cgroup removable: the ballast's
// helper, if there, leaves it (runc deletes the cgroup with the
// container). Call it before the container is deleted. The helpers are
// stopped (which waits for one in a round trip) after mu is released.
func (n *EngineTable) Evict(id string) {
	var d deferred
	defer d.run()
	n.mu.RLock()
	defer n.mu.RUnlock()
	m := n.ctrs[id]
	if m == nil {
		return
	}
	e := n.byIno[m.ino]
	if e != nil {
		e.removeHost(id)
	}
	n.evictLocked(&d, e, id, m.cgroup)
}

// evictLocked has d make the helpers in container id's memory cgroup
// (procs) leave it: namespace e's (if not nil), and those of the
// namespaces made in that cgroup or below it (nestedInLocked).
func (n *EngineTable) evictLocked(d *deferred, e *servedNamespace, id, procs string) {
	if e != nil && e.ballast != nil {
		d.evict(e.ballast, id)
	}
	for _, b := range n.nestedInLocked(procs) {
		d.evict(b, "")
	}
}

// nestedInLocked returns the shared ballasts (n.nested) of the
// namespaces made by processes in memory cgroup procs or in a cgroup
// below it: runc removes those with the container's (RemovePath removes
// the subtree), and a helper left in one keeps it busy (EBUSY). A
// container makes cgroups of its own below its cgroup where it runs
// systemd or a container engine, common on cgroup v2 with a cgroup
// namespace; there a service with PrivateIPC= makes the namespace.
func (n *EngineTable) nestedInLocked(procs string) []*memcharge.Ballast {
	if procs == "" {
		return nil
	}
	var bs []*memcharge.Ballast
	below := filepath.Dir(procs) + "/"
	for key, b := range n.nested {
		if key == procs || strings.HasPrefix(key, below) {
			bs = append(bs, b)
		}
	}
	return bs
}

// Paused makes the ballast helpers in container id's memory cgroup leave
// it once the container is frozen (runc pause). On cgroup v2 a helper
// there is frozen with the container (it is in the container's cgroup for
// every controller, and kernel/cgroup/freezer.c: cgroup_do_freeze freezes
// every task of the cgroup) and answers nothing: the namespace's next
// growth would wait helperTimeout for it with the ballast's lock held.
// The container stays a place for helpers: memcharge passes it over
// while it is frozen. On v1 the helper is in no freezer cgroup (unless
// the freezer is mounted with memory), the cgroup reads as not frozen
// (memcharge.Frozen), and the helper stays.
func (n *EngineTable) Paused(id string) {
	// The cgroup is read (a file) without mu held.
	n.mu.RLock()
	cgroup := ""
	if m := n.ctrs[id]; m != nil {
		cgroup = m.cgroup
	}
	n.mu.RUnlock()
	if cgroup == "" || !memcharge.Frozen(cgroup) {
		return
	}
	var d deferred
	defer d.run()
	n.mu.RLock()
	defer n.mu.RUnlock()
	m := n.ctrs[id]
	if m == nil || m.cgroup != cgroup {
		return
	}
	n.evictLocked(&d, n.byIno[m.ino], id, m.cgroup)
}

// Remove forgets container id; when it was the last container of its
// engine namespace, the namespace and all its objects are freed. It
// reports the freed namespace's inode, or 0.
func (n *EngineTable) Remove(id string) uint64 {
	var d deferred
	defer d.run()
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.removeLocked(id, &d)
}

// removeLocked forgets container id; what its helpers and a freed
// namespace's ballasts must do is left in d.
func (n *EngineTable) removeLocked(id string, d *deferred) uint64 {
	m := n.ctrs[id]
	if m == nil {
		return 0
	}
	delete(n.ctrs, id)
	e := n.byIno[m.ino]
	if e == nil {
		return 0
	}
	// Its cgroup goes with it: no helper may stay in it or be put there.
	e.removeHost(id)
	n.evictLocked(d, e, id, m.cgroup)
	delete(e.members, id)
	if len(e.members) > 0 {
		return 0
	}
	n.freeLocked(m.ino, e, d)
	n.publishLocked()
	n.logf("IPC namespace %d: last container (%s) deleted, engine namespace freed", m.ino, id)
	return m.ino
}

// freeLocked drops engine namespace e of kernel IPC namespace ino and
// everything it holds: its charge, its pin on a namespace of its own, its
// place among the MaxNested. Its ballasts are closed in d; the caller
// publishes byIno.
func (n *EngineTable) freeLocked(ino uint64, e *servedNamespace, d *deferred) {
	delete(n.byIno, ino)
	d.free = append(d.free, e.eng)
	if e.ballast != nil {
		d.close = append(d.close, e.ballast)
	}
	if e.nested {
		n.nestedCount--
		n.releaseNestedLocked(e, d)
	}
	if e.pin > 0 {
		unix.Close(e.pin)
		e.pin = 0
	}
	if n.OnFree != nil {
		n.OnFree(ino)
	}
}

// Local reports whether container id was created through this shim.
func (n *EngineTable) Local(id string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	m := n.ctrs[id]
	return m != nil && !m.foreign
}

// Release ends one served listener of a foreign container; with its last
// one the container leaves (as Remove). It reports whether the container
// left.
func (n *EngineTable) Release(id string) bool {
	var d deferred
	defer d.run()
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.ctrs[id]
	if m == nil || !m.foreign {
		return false
	}
	m.listeners--
	if m.listeners > 0 {
		return false
	}
	n.removeLocked(id, &d)
	return true
}

// Foreigners returns the number of foreign containers being served.
func (n *EngineTable) Foreigners() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	c := 0
	for _, m := range n.ctrs {
		if m.foreign {
			c++
		}
	}
	return c
}

// Known reports whether kernel IPC namespace ino has an engine namespace
// in this shim.
func (n *EngineTable) Known(ino uint64) bool {
	return n.lookup(ino) != nil
}

// Len returns the number of live engine namespaces.
func (n *EngineTable) Len() int {
	return len(n.snapshot())
}

// MaxNested bounds the engine namespaces a shim makes for IPC namespaces
// that processes made themselves (unshare -i, not a container's). The
// kernel bounds them with user.max_ipc_namespaces and frees one with its
// last process; the shim learns of neither, so when the bound is reached
// it frees those no process on the host is in any more (sweepNested) and
// refuses the rest with ENOMEM.
const MaxNested = 512

// nestedBytes is what an engine namespace of its own costs the shim
// (11.3 KB measured: engines, registries, limits), charged to the
// creator's memory cgroup like its objects.
const nestedBytes = 16 << 10

// engines returns the engine namespace of kernel IPC namespace ino. A
// process that made an IPC namespace of its own inside a container
// (unshare -i) gets a fresh one with Linux's defaults, as from the
// kernel, charged to the memory cgroup of the process that made it; it
// lives until a sweep finds no process in it. The error (ENOMEM) is the
// call's answer when none can be made.
//
// The lookup of a namespace served takes no lock. Making one does its
// slow parts (the sweep, reading the caller's cgroup, the first charge:
// a helper round trip) with mu released; its place among the MaxNested
// and its share of the cgroup's ballast are taken first, under mu.
func (n *EngineTable) engines(ino uint64, caller int) (*gateway.Engines, error) {
	if e := n.lookup(ino); e != nil {
		return e.eng, nil
	}
	swept := false
	for {
		n.mu.Lock()
		if e := n.byIno[ino]; e != nil {
			n.mu.Unlock()
			return e.eng, nil
		}
		if wait := n.making[ino]; wait != nil {
			// Another thread of the namespace is making it.
			n.mu.Unlock()
			<-wait
			continue
		}
		if !swept && (n.nestedCount >= MaxNested || n.nestedCount >= n.nextSweep) {
			n.mu.Unlock()
			n.sweepNested()
			swept = true
			continue
		}
		if n.nestedCount >= MaxNested {
			n.logf("IPC namespace %d: refused, %d namespaces not a container's are in use (MaxNested)", ino, n.nestedCount)
			n.refusedLocked(ino)
			n.mu.Unlock()
			return nil, unix.ENOMEM
		}
		break
	}
	// mu is held: take the namespace's place.
	done := make(chan struct{})
	n.making[ino] = done
	n.nestedCount++
	n.mu.Unlock()
	return n.makeNested(ino, caller, done)
}

// makeNested makes the engine namespace of ino, not a container's, whose
// place (nestedCount, making) engines took.
func (n *EngineTable) makeNested(ino uint64, caller int, done chan struct{}) (*gateway.Engines, error) {
	name := "ipc:" + strconv.FormatUint(ino, 10)
	e := &servedNamespace{eng: gateway.NewEngines(name, ipcns.DefaultLimits()), limits: ipcns.DefaultLimits(), members: map[string]struct{}{}, nested: true}
	charged := true
	if n.ChargePods {
		res := e.eng.Sem().Resources()
		if procs, err := memcharge.MemoryCgroup(caller); err != nil {
			n.logf("IPC namespace %d: objects not charged: memory cgroup of pid %d: %v", ino, caller, err)
		} else {
			n.mu.Lock()
			b := n.nestedBallastLocked(procs)
			if b != nil {
				// A user from now: the ballast is not closed under it.
				e.nestedKey = procs
				n.nestedUsers[procs]++
			}
			n.mu.Unlock()
			if b != nil {
				_ = res.SetAccount(b)
			}
		}
		charged = res.Charge(nestedBytes) == nil
	}
	if charged {
		e.pin = pinNamespace(caller, ino)
	}
	var d deferred
	defer d.run()
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.making, ino)
	close(done)
	if other := n.byIno[ino]; other != nil || !charged {
		// Refused, or a container attached to the namespace meanwhile
		// (its engine namespace serves it): this one is thrown away.
		n.nestedCount--
		n.releaseNestedLocked(e, &d)
		if e.pin > 0 {
			unix.Close(e.pin)
			e.pin = 0
		}
		if other != nil {
			return other.eng, nil
		}
		n.refusedLocked(ino)
		return nil, unix.ENOMEM
	}
	n.byIno[ino] = e
	n.publishLocked()
	n.logf("IPC namespace %d: not a container's; new engine namespace with default limits", ino)
	return e.eng, nil
}

// refusedLocked lets go of what the gateway took for a namespace it
// could not serve (its watch: the kernel's table of watched namespaces is
// bounded, and a refused namespace must not fill it).
func (n *EngineTable) refusedLocked(ino uint64) {
	if n.OnFree != nil {
		n.OnFree(ino)
	}
}

// pinNamespace returns an O_PATH fd on thread tid's IPC namespace if it
// is still ino, or 0.
func pinNamespace(tid int, ino uint64) int {
	fd, err := unix.Open("/proc/"+strconv.Itoa(tid)+"/ns/ipc", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Ino != ino {
		unix.Close(fd)
		return 0
	}
	return fd
}

// sweepRead, if set (by a test), is called between a sweep's reading of
// /proc and its freeing.
var sweepRead func()

// sweepNested frees the engine namespaces not a container's that no
// container is attached to and no thread on the host is in (their
// objects die with them, as the kernel's do with free_ipc_ns), if a sweep
// is still due: amortized, the next is due when the count has doubled
// since, or at MaxNested. It reads every thread's
// /proc/PID/task/TID/ns/ipc once, with mu released; a namespace is freed
// only if it was there before the reading began and has no container
// yet. A namespace kept only by an fd or a bind mount is not seen: it is
// freed.
func (n *EngineTable) sweepNested() {
	n.sweepMu.Lock()
	defer n.sweepMu.Unlock()
	n.mu.Lock()
	if n.nestedCount < MaxNested && n.nestedCount < n.nextSweep {
		// Another caller swept meanwhile.
		n.mu.Unlock()
		return
	}
	idle := map[uint64]*servedNamespace{}
	for ino, e := range n.byIno {
		if e.nested && len(e.members) == 0 {
			idle[ino] = e
		}
	}
	n.mu.Unlock()

	inUse := map[uint64]bool{}
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/ns/ipc")
	for _, p := range tasks {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			inUse[st.Ino] = true
		}
	}

	if sweepRead != nil {
		sweepRead()
	}
	var d deferred
	defer d.run()
	n.mu.Lock()
	defer n.mu.Unlock()
	freed := false
	for ino, e := range idle {
		if n.byIno[ino] == e && len(e.members) == 0 && !inUse[ino] {
			n.freeLocked(ino, e, &d)
			freed = true
			n.logf("IPC namespace %d: no process left in it, engine namespace freed", ino)
		}
	}
	if freed {
		n.publishLocked()
	}
	n.nextSweep = max(64, 2*n.nestedCount)
}

// EnginesOf returns the engines of the IPC namespace of t, the caller of
// a trapped call, making them if t's namespace is one nested in a
// served container's (gateway.EngineTable).
func (n *EngineTable) EnginesOf(t *gateway.Task) (*gateway.Engines, error) {
	return n.engines(t.IPCNS, t.Tid)
}

// Peek returns the engine namespace of kernel IPC namespace ino without
// making one (the in-container view's lookup).
func (n *EngineTable) Peek(ino uint64) *gateway.Engines {
	if e := n.lookup(ino); e != nil {
		return e.eng
	}
	return nil
}

// Exit applies a process's SEM_UNDO adjustments (gateway.EngineTable).
func (n *EngineTable) Exit(pid *ipcns.Pid) {
	for _, e := range n.snapshot() {
		e.eng.Exit(pid)
	}
}
