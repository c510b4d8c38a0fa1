package control

import "time"

// The JSON the control endpoint serves (GET /v1/state) and ipcctl --json
// prints. Field names are the schema: add, never rename.

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

// SemSet is a semaphore set.
type SemSet struct {
	ID    int32 `json:"id"`
	Perm  Perm  `json:"perm"`
	Otime int64 `json:"otime"`
	Ctime int64 `json:"ctime"`
	Sems  []Sem `json:"sems"`
	Undos int   `json:"undo_entries"`
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
	// semop: the operations and the index of the one it blocks on.
	Sops     []Sembuf `json:"sops,omitempty"`
	Blocking int      `json:"blocking"`
	// msgsnd: the message's type and size; msgrcv: msgtyp as passed,
	// the search mode and msgsz.
	Type    int64     `json:"type,omitempty"`
	Mode    string    `json:"mode,omitempty"`
	Size    int64     `json:"size,omitempty"`
	Since   time.Time `json:"since"`
	Seconds float64   `json:"waiting_seconds"`
}

// Undo is one process's SEM_UNDO adjustments for one set.
type Undo struct {
	SemID int32   `json:"sem_id"`
	Key   int32   `json:"key"`
	Pid   Pid     `json:"pid"`
	Adj   []int16 `json:"adj"`
}
