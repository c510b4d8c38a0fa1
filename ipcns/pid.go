package ipcns

// PidNamespace is a pid namespace: a node in the tree whose root is the
// host's. Two PidNamespaces are the same namespace only if they are the
// same pointer; the gateway keeps one per kernel namespace (keyed by its
// nsfs inode).
type PidNamespace struct {
	parent *PidNamespace
	level  int
	// ID identifies the namespace to people and host tools (the nsfs inode
	// of /proc/<pid>/ns/pid); the engine does not interpret it.
	ID uint64
}

// NewPidNamespace returns a child of parent, or a root namespace when
// parent is nil.
func NewPidNamespace(parent *PidNamespace, id uint64) *PidNamespace {
	ns := &PidNamespace{parent: parent, ID: id}
	if parent != nil {
		ns.level = parent.level + 1
	}
	return ns
}

// Parent returns the namespace's parent, nil for a root.
func (ns *PidNamespace) Parent() *PidNamespace { return ns.parent }

// Level is the depth of the namespace: 0 for a root.
func (ns *PidNamespace) Level() int { return ns.level }

// Pid is a handle for one process identity, the kernel's struct pid: the
// numbers a thread group has in its own pid namespace and in every ancestor
// of it. Objects store handles where Linux stores struct pid pointers
// (sempid, msg_lspid, msg_lrpid) and translate them into the pid namespace
// of the process that asks, as pid_vnr does: the number if the process is
// visible there, 0 otherwise, and the same number after the process has
// exited.
//
// A Pid is immutable, so holders share it freely. It is the kernel's
// reference-counted pid with the counting left to the garbage collector:
// storing a handle is one pointer store, and Store skips even that when the
// same handle is already there, so a process that operates on an object
// over and over writes nothing shared to record its identity (the cost
// ipc_update_pid avoids in ipc/util.h).
type Pid struct {
	nrs []int32 // nrs[i]: the number in the namespace at level i
	ns  *PidNamespace
}

// NewPid returns the handle of a process whose own (innermost) pid
// namespace is ns and whose numbers, from the root namespace down to ns,
// are nrs. It panics if len(nrs) does not match the depth of ns: that is a
// programming error of the caller.
func NewPid(ns *PidNamespace, nrs ...int32) *Pid {
	if len(nrs) != ns.level+1 {
		panic("ipcns: NewPid: number count does not match namespace depth")
	}
	return &Pid{nrs: append([]int32(nil), nrs...), ns: ns}
}

// In returns the number of p in namespace ns, or 0 if p is nil or not
// visible in ns (pid_nr_ns).
func (p *Pid) In(ns *PidNamespace) int32 {
	if p == nil || ns == nil || ns.level > p.ns.level {
		return 0
	}
	owner := p.ns
	for owner.level > ns.level {
		owner = owner.parent
	}
	if owner != ns {
		return 0
	}
	return p.nrs[ns.level]
}

// Namespace returns the process's own pid namespace.
func (p *Pid) Namespace() *PidNamespace { return p.ns }

// StorePid records p in *slot unless it already holds p: the kernel's
// ipc_update_pid, which neither writes nor touches a counter when the
// process is the one already recorded.
func StorePid(slot **Pid, p *Pid) {
	if *slot != p {
		*slot = p
	}
}
