package control

import (
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// The JSON the control endpoint serves (GET /v1/state) and ipcctl --json
// prints. Field names are the schema: add, never rename.
//
// A read costs what it asks for, not what the namespaces hold: by default
// each namespace is a summary (its counts, the headers of at most
// DefaultLimit sets and queues, as many waiters and undo entries) and a
// set's semaphores are listed only when that set is asked for (Query.Set),
// a page at a time. Lists cut short are named in NamespaceState.Truncated;
// their full lengths are in Usage.

// Sizes of an answer.
const (
	// DefaultLimit is how many sets, queues, waiters and undo entries a
	// namespace lists, and how many semaphores a set's page holds, when
	// the query does not say.
	DefaultLimit = 1000
	// MaxLimit caps Query.Limit: half of IPCMNI, so that the largest
	// answer (every list full) stays within 32 MiB of the shim's memory;
	// the sets and queues of a full namespace take two pages
	// (Query.Offset).
	MaxLimit = 16384
	// InlineSems is how many per-semaphore values an undo entry
	// (adjustments) or a waiter (operations) carries in a list; the rest
	// are in the set's page (Query.Set).
	InlineSems = 64
)

// Query says what a state read wants (GET /v1/state?ns=&set=&offset=&limit=).
// The zero Query is the default summary.
type Query struct {
	// NS keeps only the engine namespace of this inode (0: all).
	NS uint64
	// Set, when HasSet, asks for the semaphores of set Set (in every
	// namespace kept that has it): Limit of them from Offset, and the
	// set's undo entries with their adjustments of those semaphores.
	Set    int32
	HasSet bool
	// Offset is the first semaphore of the set's page with HasSet, else
	// the first set and queue listed (in index order).
	Offset int
	// Limit caps each list (0: DefaultLimit; at most MaxLimit).
	Limit int
	// CountsOnly leaves out every list: the counts, limits and bounds
	// the metrics need, read without a walk of the semaphores.
	CountsOnly bool
}

// Max returns the query's list cap.
func (q Query) Max() int {
	if q.Limit <= 0 {
		return DefaultLimit
	}
	return min(q.Limit, MaxLimit)
}

// Values encodes q as URL query parameters (CountsOnly is not sent: it
// is the metrics' own read).
func (q Query) Values() url.Values {
	v := url.Values{}
	if q.NS != 0 {
		v.Set("ns", strconv.FormatUint(q.NS, 10))
	}
	if q.HasSet {
		v.Set("set", strconv.Itoa(int(q.Set)))
	}
	if q.Offset != 0 {
		v.Set("offset", strconv.Itoa(q.Offset))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ParseQuery reads a Query from URL query parameters.
func ParseQuery(v url.Values) (Query, error) {
	var q Query
	num := func(key string, bits int) (int64, bool, error) {
		s := v.Get(key)
		if s == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(s, 10, bits)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("%s=%q: want a non-negative number", key, s)
		}
		return n, true, nil
	}
	if s := v.Get("ns"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("ns=%q: want an IPC namespace inode: %w", s, err)
		}
		q.NS = n
	}
	set, ok, err := num("set", 32)
	if err != nil {
		return q, err
	}
	q.Set, q.HasSet = int32(set), ok
	off, _, err := num("offset", 32)
	if err != nil {
		return q, err
	}
	q.Offset = int(off)
	lim, _, err := num("limit", 32)
	if err != nil {
		return q, err
	}
	q.Limit = int(lim)
	return q, nil
}

// Snapshot is one shim's state.
type Snapshot struct {
	Shim       Shim             `json:"shim"`
	Namespaces []NamespaceState `json:"namespaces"`
	// Taken is when the snapshot was made.
	Taken time.Time `json:"taken"`
}

// Shim identifies the shim process.
type Shim struct {
	Pid int `json:"pid"`
	// Socket is the control socket.
	Socket string `json:"socket"`
	// ContainerdNamespace is the containerd namespace the shim serves
	// ("k8s.io" under CRI).
	ContainerdNamespace string    `json:"containerd_namespace,omitempty"`
	Started             time.Time `json:"started"`
	// Interrupted, Restarts, Refused: the gateway's signal counters.
	Interrupted int64 `json:"interrupted"`
	Restarts    int64 `json:"restarts"`
	Refused     int64 `json:"refused"`
}

// Pod is the Kubernetes pod of an engine namespace, from the CRI
// annotations of its containers; absent outside CRI.
type Pod struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid,omitempty"`
	SandboxID string `json:"sandbox_id,omitempty"`
}

// Container is a container attached to an engine namespace.
type Container struct {
	ID string `json:"id"`
	// Name is the CRI container name ("" for the sandbox and outside
	// CRI).
	Name string `json:"name,omitempty"`
	// Sandbox is true for a CRI pod sandbox (pause) container.
	Sandbox bool `json:"sandbox,omitempty"`
	// PidNS is the inode of the container's pid namespace, 0 until one
	// of its processes was served.
	PidNS uint64 `json:"pid_ns,omitempty"`
	// InitPid is the host pid of the container's first served process.
	InitPid int `json:"init_pid,omitempty"`
}

// Pid is a process as seen from the host (the shim's pid namespace) and
// from its own container.
type Pid struct {
	Host      int32 `json:"host"`
	Container int32 `json:"container"`
	// ContainerID is the container whose pid namespace the process is in,
	// when the shim knows it.
	ContainerID string `json:"container_id,omitempty"`
}

// Limits are the namespace's sysctls as the engine enforces them.
type Limits struct {
	SemMSL int `json:"semmsl"`
	SemMNS int `json:"semmns"`
	SemOPM int `json:"semopm"`
	SemMNI int `json:"semmni"`
	MsgMax int `json:"msgmax"`
	MsgMNB int `json:"msgmnb"`
	MsgMNI int `json:"msgmni"`
}

// Bounds are what the namespace's limits let its pod hold in the shim,
// whatever its processes do (CVE-2024-3056: one pod must not exhaust the
// node). MaxStateBytes estimates the worst case of the shim memory the
// namespace can pin: MaxSemaphores × SemBytes + MaxSets × SetBytes +
// MaxMsgBytes + MaxMessages × MsgHeaderBytes (a message of zero bytes
// still counts one against a queue's qbytes, so a queue can hold up to
// qbytes messages). Undo entries are not counted: they are bounded by
// processes × sets.
type Bounds struct {
	MaxSets       int   `json:"max_sets"`
	MaxSemaphores int64 `json:"max_semaphores"`
	MaxQueues     int   `json:"max_queues"`
	// MaxMsgBytes is the engine's payload budget, msgmni × msgmnb: no
	// queue can grow past it even with qbytes raised.
	MaxMsgBytes   int64 `json:"max_msg_bytes"`
	MaxMessages   int64 `json:"max_messages"`
	MaxStateBytes int64 `json:"max_state_bytes"`
}

// Per-object costs used for Bounds.MaxStateBytes (the engines' structs,
// rounded up).
const (
	SemBytes       = 64
	SetBytes       = 256
	QueueBytes     = 320
	MsgHeaderBytes = 32
)

// BoundsOf computes the bounds of limits l.
func BoundsOf(l Limits) Bounds {
	sems := min(int64(l.SemMNS), int64(l.SemMNI)*int64(l.SemMSL))
	msgBytes := int64(l.MsgMNI) * int64(l.MsgMNB)
	b := Bounds{MaxSets: l.SemMNI, MaxSemaphores: sems, MaxQueues: l.MsgMNI, MaxMsgBytes: msgBytes, MaxMessages: msgBytes}
	b.MaxStateBytes = sems*SemBytes + int64(l.SemMNI)*SetBytes + int64(l.MsgMNI)*QueueBytes + msgBytes + msgBytes*MsgHeaderBytes
	return b
}

// Usage is what the namespace holds now.
type Usage struct {
	Sets       int   `json:"sets"`
	Semaphores int   `json:"semaphores"`
	Queues     int   `json:"queues"`
	Messages   int64 `json:"messages"`
	Bytes      int64 `json:"bytes"`
	// ReservedBytes is the payload room the queues hold from MaxMsgBytes.
	ReservedBytes int64 `json:"reserved_bytes"`
	UndoEntries   int   `json:"undo_entries"`
	Waiters       int   `json:"waiters"`
	// The waiters by call: semop, msgsnd and msgrcv.
	SemopWaiters  int `json:"semop_waiters"`
	MsgsndWaiters int `json:"msgsnd_waiters"`
	MsgrcvWaiters int `json:"msgrcv_waiters"`
}

// NamespaceState is one engine namespace: a kernel IPC namespace whose System
// V IPC the shim serves.
type NamespaceState struct {
	// Inode is the kernel IPC namespace's inode (/proc/<pid>/ns/ipc).
	Inode      uint64      `json:"inode"`
	Pod        *Pod        `json:"pod,omitempty"`
	Containers []Container `json:"containers"`
	Limits     Limits      `json:"limits"`
	Bounds     Bounds      `json:"bounds"`
	Usage      Usage       `json:"usage"`
	SemSets    []SemSet    `json:"sem_sets"`
	Queues     []Queue     `json:"msg_queues"`
	Waiters    []Waiter    `json:"waiters"`
	Undo       []Undo      `json:"undo"`
	// Truncated names the lists ("sem_sets", "msg_queues", "waiters",
	// "undo") that the query's limit cut: entries follow the ones listed
	// (Usage counts them all; Query.Offset reaches the sets and queues
	// after).
	Truncated []string `json:"truncated,omitempty"`
}

// Perm is an object's ipc_perm.
type Perm struct {
	Key  int32  `json:"key"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	CUID uint32 `json:"cuid"`
	CGID uint32 `json:"cgid"`
	Mode uint16 `json:"mode"`
}

// SemSet is a semaphore set: its header, and its semaphores only when
// the query asked for the set (Query.Set), Sems[i] being semaphore
// SemsOffset+i.
type SemSet struct {
	ID         int32 `json:"id"`
	Perm       Perm  `json:"perm"`
	Otime      int64 `json:"otime"`
	Ctime      int64 `json:"ctime"`
	Nsems      int   `json:"nsems"`
	Waiters    int   `json:"waiters"`
	Sems       []Sem `json:"sems,omitempty"`
	SemsOffset int   `json:"sems_offset,omitempty"`
	Undos      int   `json:"undo_entries"`
}

// Sem is one semaphore.
type Sem struct {
	Val int32 `json:"val"`
	// Pid is sempid, the last process to operate on it (nil: none).
	Pid  *Pid `json:"pid,omitempty"`
	Ncnt int  `json:"ncnt"`
	Zcnt int  `json:"zcnt"`
}

// Queue is a message queue.
type Queue struct {
	ID        int32  `json:"id"`
	Perm      Perm   `json:"perm"`
	Stime     int64  `json:"stime"`
	Rtime     int64  `json:"rtime"`
	Ctime     int64  `json:"ctime"`
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
	Qbytes    uint64 `json:"qbytes"`
	Lspid     *Pid   `json:"lspid,omitempty"`
	Lrpid     *Pid   `json:"lrpid,omitempty"`
	Senders   int    `json:"senders"`
	Receivers int    `json:"receivers"`
	Reserved  int64  `json:"reserved_bytes"`
}

// Sembuf is one operation of a sleeping semop.
type Sembuf struct {
	Num uint16 `json:"num"`
	Op  int16  `json:"op"`
	Flg int16  `json:"flg"`
}

// Waiter is a process asleep in the engine: who waits on what, and since
// when.
type Waiter struct {
	// Kind is "semop", "msgsnd" or "msgrcv".
	Kind string `json:"kind"`
	// ID is the semaphore set or queue id.
	ID  int32 `json:"id"`
	Key int32 `json:"key"`
	Pid Pid   `json:"pid"`
	// Thread is the sleeping thread when it is not the process's leader
	// (msgrcv only).
	Thread *Pid `json:"thread,omitempty"`
	// semop: the operations (the first InlineSems; Nsops counts them
	// all when there are more) and the index of the one it blocks on.
	Sops     []Sembuf `json:"sops,omitempty"`
	Nsops    int      `json:"nsops,omitempty"`
	Blocking int      `json:"blocking"`
	// msgsnd: the message's type and size; msgrcv: msgtyp as passed,
	// the search mode and msgsz.
	Type    int64     `json:"type,omitempty"`
	Mode    string    `json:"mode,omitempty"`
	Size    int64     `json:"size,omitempty"`
	Since   time.Time `json:"since"`
	Seconds float64   `json:"waiting_seconds"`
}

// Undo is one process's SEM_UNDO adjustments for one set: Adj[i] is
// semaphore AdjOffset+i's. A list carries the first InlineSems; the
// set's page (Query.Set) those of its semaphores. AdjTruncated says the
// set has semaphores past Adj.
type Undo struct {
	SemID        int32   `json:"sem_id"`
	Key          int32   `json:"key"`
	Pid          Pid     `json:"pid"`
	Adj          []int16 `json:"adj"`
	AdjOffset    int     `json:"adj_offset,omitempty"`
	AdjTruncated bool    `json:"adj_truncated,omitempty"`
}
