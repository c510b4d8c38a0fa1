package ipcns

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Header is the part of an IPC object that the Registry manages: its id and
// its ipc_perm. Engines embed a Header in their objects.
type Header struct {
	id  int32
	seq uint16
	// perm is replaced, never changed in place, so that the permission
	// check on the hot path is one atomic load and needs no lock. Writers
	// hold the object's lock.
	perm atomic.Pointer[Perm]
	// deleted is set by Registry.Remove with the object's lock held, so a
	// holder of that lock sees it settled (the kernel's ipc_valid_object).
	deleted atomic.Bool
}

func (h *Header) header() *Header { return h }

// ID returns the object's id.
func (h *Header) ID() int32 { return h.id }

// Perm returns the object's current ipc_perm. The caller must not change it.
func (h *Header) Perm() *Perm { return h.perm.Load() }

// SetPerm installs p as the object's ipc_perm; the caller holds the
// object's lock.
func (h *Header) SetPerm(p Perm) { h.perm.Store(&p) }

// Deleted reports whether the object has been removed (IPC_RMID).
func (h *Header) Deleted() bool { return h.deleted.Load() }

// object constrains Registry's type parameters: P is a pointer to an engine
// object that embeds a Header.
type object[T any] interface {
	*T
	header() *Header
}

const (
	chunkShift = 8
	chunkSize  = 1 << chunkShift
)

type chunk[T any] [chunkSize]atomic.Pointer[T]

// Registry is one kind's id space in one namespace, the kernel's struct
// ipc_ids: ids of the form seq<<15 | idx, allocated cyclically with the
// sequence number bumped whenever the index wraps, as ipc_idr_alloc does,
// and a key index for *get.
//
// Lookup by id takes no lock: the table is a two-level array of atomic
// pointers filled in on first use, so semop and msgsnd never contend on a
// namespace-wide lock. Everything else is serialised by mu.
type Registry[T any, P object[T]] struct {
	// mu protects the fields below and every store into table.
	mu      sync.Mutex
	byKey   map[int32]P
	used    [IPCMNI / 64]uint64 // bitmap of allocated indexes
	inUse   int
	seq     int
	lastIdx int // index of the last cyclic allocation
	idrNext int // where the next cyclic search starts
	maxIdx  int // highest index in use, -1 for none
	nextID  int // sem_next_id / msg_next_id, -1 when unset

	table [IPCMNI / chunkSize]atomic.Pointer[chunk[T]]
}

// NewRegistry returns an empty registry.
func NewRegistry[T any, P object[T]]() *Registry[T, P] {
	return &Registry[T, P]{byKey: make(map[int32]P), lastIdx: -1, maxIdx: -1, nextID: -1}
}

// Lookup returns the object with the given id, or EINVAL if there is none
// or the id is stale (ipc_obtain_object_check). It takes no lock: the
// object may be removed concurrently, which its lock holder detects with
// Deleted.
func (r *Registry[T, P]) Lookup(id int32) (P, error) {
	if id < 0 {
		return nil, unix.EINVAL
	}
	p := r.at(int(id) & (IPCMNI - 1))
	if p == nil || int(P(p).header().seq) != int(id)>>idxShift {
		return nil, unix.EINVAL
	}
	return p, nil
}

// LookupIndex returns the object at the index of id, whatever its sequence
// number, as the *_STAT commands do (ipc_obtain_object_idr), or EINVAL.
func (r *Registry[T, P]) LookupIndex(id int32) (P, error) {
	if id < 0 {
		return nil, unix.EINVAL
	}
	if p := r.at(int(id) & (IPCMNI - 1)); p != nil {
		return p, nil
	}
	return nil, unix.EINVAL
}

func (r *Registry[T, P]) at(idx int) P {
	c := r.table[idx>>chunkShift].Load()
	if c == nil {
		return nil
	}
	return c[idx&(chunkSize-1)].Load()
}

// GetOps are the kind-specific steps of Get.
type GetOps[P any] struct {
	// New makes an object for a new id, checking the kind's own limits
	// first (newary, newque). The registry fills in its Header.
	New func(perm Perm) (P, error)
	// Added is called, with the registry locked, once a new object has an
	// id: the place for namespace-wide accounting.
	Added func(P)
	// Check runs on an existing object found by key, before the permission
	// check (sem_more_checks). It may be nil.
	Check func(P) error
	// Discard is called for an object New made that got no id (the
	// namespace is full: ENOSPC), to undo New's accounting. It may be nil.
	Discard func(P)
}

// Get is the kernel's ipcget: with IPC_PRIVATE it always creates; else it
// finds the key and creates the object only with IPC_CREAT (ENOENT
// otherwise), refuses IPC_CREAT|IPC_EXCL on an existing key with EEXIST,
// and checks an existing object's permissions against the mode bits of flg
// (EACCES). limit is the kind's object limit (semmni, msgmni).
func (r *Registry[T, P]) Get(c *Creds, key int32, flg int, limit int, ops GetOps[P]) (int32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if key != IPCPrivate {
		if p, ok := r.byKey[key]; ok {
			if flg&IPCCreat != 0 && flg&IPCExcl != 0 {
				return 0, unix.EEXIST
			}
			if ops.Check != nil {
				if err := ops.Check(p); err != nil {
					return 0, err
				}
			}
			h := P(p).header()
			if err := h.Perm().Check(c, flg); err != nil {
				return 0, err
			}
			return h.id, nil
		}
		if flg&IPCCreat == 0 {
			return 0, unix.ENOENT
		}
	}
	perm := Perm{Key: key, UID: c.EUID, CUID: c.EUID, GID: c.EGID, CGID: c.EGID, Mode: uint16(flg & modeMask)}
	p, err := ops.New(perm)
	if err != nil {
		return 0, err
	}
	if err := r.addLocked(p, perm, limit); err != nil {
		if ops.Discard != nil {
			ops.Discard(p)
		}
		return 0, err
	}
	if ops.Added != nil {
		ops.Added(p)
	}
	return P(p).header().id, nil
}

// addLocked gives p an id (ipc_addid and ipc_idr_alloc).
func (r *Registry[T, P]) addLocked(p P, perm Perm, limit int) error {
	limit = min(limit, IPCMNI)
	if r.inUse >= limit {
		return unix.ENOSPC
	}
	var idx int
	if next := r.nextID; next >= 0 {
		// A checkpoint/restore tool asked for this id: take the lowest
		// free index from its index up, with its sequence number. The
		// request is used once.
		r.nextID = -1
		idx = r.freeFrom(next&(IPCMNI-1), IPCMNI)
		if idx < 0 {
			return unix.ENOSPC
		}
		perm.Seq = uint16(next >> idxShift)
	} else {
		// idr_alloc_cyclic over [0, max(inUse*3/2, 64)), bumping seq when
		// the index did not move forward.
		end := min(max(r.inUse*3/2, minIdxCycle), IPCMNI)
		idx = r.freeFrom(r.idrNext, end)
		if idx < 0 && r.idrNext > 0 {
			idx = r.freeFrom(0, end)
		}
		if idx < 0 {
			return unix.ENOSPC
		}
		r.idrNext = idx + 1
		if idx <= r.lastIdx {
			r.seq++
			if r.seq >= seqMax {
				r.seq = 0
			}
		}
		r.lastIdx = idx
		perm.Seq = uint16(r.seq)
	}
	h := P(p).header()
	h.seq = perm.Seq
	h.id = int32(int(perm.Seq)<<idxShift | idx)
	h.perm.Store(&perm)
	r.used[idx/64] |= 1 << (idx % 64)
	r.inUse++
	r.maxIdx = max(r.maxIdx, idx)
	if perm.Key != IPCPrivate {
		r.byKey[perm.Key] = p
	}
	c := r.table[idx>>chunkShift].Load()
	if c == nil {
		c = new(chunk[T])
		r.table[idx>>chunkShift].Store(c)
	}
	c[idx&(chunkSize-1)].Store(p)
	return nil
}

// freeFrom returns the lowest free index in [from, end), or -1.
func (r *Registry[T, P]) freeFrom(from, end int) int {
	for i := from; i < end; {
		w := ^r.used[i/64] >> (i % 64)
		if w == 0 {
			i = (i/64 + 1) * 64
			continue
		}
		i += bits.TrailingZeros64(w)
		if i < end {
			return i
		}
		break
	}
	return -1
}

// Remove takes p out of the registry and marks it deleted (ipc_rmid). The
// caller holds p's lock, so that whoever takes the lock next sees Deleted.
func (r *Registry[T, P]) Remove(p P) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := P(p).header()
	idx := int(h.id) & (IPCMNI - 1)
	if r.at(idx) != p {
		return
	}
	r.table[idx>>chunkShift].Load()[idx&(chunkSize-1)].Store(nil)
	r.used[idx/64] &^= 1 << (idx % 64)
	r.inUse--
	if key := h.Perm().Key; key != IPCPrivate && r.byKey[key] == p {
		delete(r.byKey, key)
	}
	h.deleted.Store(true)
	for r.maxIdx >= 0 && r.used[r.maxIdx/64]&(1<<(r.maxIdx%64)) == 0 {
		r.maxIdx--
	}
}

// InUse returns the number of objects.
func (r *Registry[T, P]) InUse() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inUse
}

// MaxIndex returns the highest index in use, or -1 when there is none
// (ipc_get_maxidx).
func (r *Registry[T, P]) MaxIndex() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inUse == 0 {
		return -1
	}
	return r.maxIdx
}

// NextID returns the pending sem_next_id/msg_next_id, -1 when unset.
func (r *Registry[T, P]) NextID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nextID
}

// SetNextID sets the id the next new object gets (the sysctl
// kernel.sem_next_id or kernel.msg_next_id); -1 clears it.
func (r *Registry[T, P]) SetNextID(id int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID = max(id, -1)
}

// All returns the objects in index order.
func (r *Registry[T, P]) All() []P {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []P
	for i := 0; i <= r.maxIdx; i++ {
		if p := r.at(i); p != nil {
			out = append(out, p)
		}
	}
	return out
}
