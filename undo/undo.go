// Package undo holds SEM_UNDO state: each process's list of adjustments
// (the kernel's struct sem_undo_list) and each semaphore set's chain of the
// entries that refer to it (sem_array.list_id).
//
// An Entry belongs to exactly one process list and one set, and it names
// its set by pointer, never by id: an entry of a removed set can therefore
// never be applied to a new set that got the same id, and an entry of one
// namespace never to another's set. The rules for the values (ranges,
// clamping at exit) are the semaphore engine's.
package undo

import (
	"sync"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// Range of a semaphore adjustment: semop fails with ERANGE outside it.
const (
	MinAdj = -ipcns.SemAEM - 1
	MaxAdj = ipcns.SemAEM
)

// Entry is one process's adjustments for one semaphore set (struct
// sem_undo).
type Entry struct {
	// Adj[i] is the value added to semaphore i when the process exits.
	// The set's locks protect it: the lock of semaphore i or the whole-set
	// lock, as for the semaphore's value.
	Adj []int16
	// set and list never change.
	set  any
	list *List
	// prev and next link the set's Chain; the set's whole-set lock
	// protects them.
	prev, next *Entry
	// linked is true while the entry is on its list and chain; both the
	// list's mu and the set's whole-set lock are held to change it.
	linked bool
}

// Set returns the semaphore set the entry belongs to.
func (e *Entry) Set() any { return e.set }

// Owner returns the process the entry belongs to.
func (e *Entry) Owner() *ipcns.Pid { return e.list.owner }

// List is one process's undo list in one namespace. Threads of a process
// share it, as CLONE_SYSVSEM makes them share the kernel's.
type List struct {
	owner *ipcns.Pid
	// mu protects entries and exited.
	mu      sync.Mutex
	entries []*Entry // newest first, as list_add_rcu leaves them
	exited  bool
}

// NewList returns the empty undo list of process owner.
func NewList(owner *ipcns.Pid) *List { return &List{owner: owner} }

// Owner returns the process the list belongs to.
func (l *List) Owner() *ipcns.Pid { return l.owner }

// Find returns the process's entry for set, or nil.
func (l *List) Find(set any) *Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.findLocked(set)
}

func (l *List) findLocked(set any) *Entry {
	for _, e := range l.entries {
		if e.set == set {
			return e
		}
	}
	return nil
}

// Attach returns the entry for set, adding a zeroed one of nsems
// adjustments to the list and to chain if there is none. The caller holds
// the set's whole-set lock, which protects chain. It returns nil if the
// process has exited.
func (l *List) Attach(set any, nsems int, chain *Chain) *Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.exited {
		return nil
	}
	if e := l.findLocked(set); e != nil {
		return e
	}
	e := &Entry{Adj: make([]int16, nsems), set: set, list: l, linked: true}
	l.entries = append([]*Entry{e}, l.entries...)
	chain.push(e)
	return e
}

// Detach removes e from its list and from chain (freeary, exit_sem). The
// caller holds the set's whole-set lock. It reports whether e was still
// linked.
func (e *Entry) Detach(chain *Chain) bool {
	l := e.list
	l.mu.Lock()
	defer l.mu.Unlock()
	if !e.linked {
		return false
	}
	e.linked = false
	for i, x := range l.entries {
		if x == e {
			l.entries = append(l.entries[:i], l.entries[i+1:]...)
			break
		}
	}
	chain.remove(e)
	return true
}

// Exit marks the process as gone and returns its entries, newest first,
// for the engine to apply: after Exit the list takes no new entries.
func (l *List) Exit() []*Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exited = true
	return append([]*Entry(nil), l.entries...)
}

// Len returns the number of entries.
func (l *List) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// Chain is a semaphore set's list of the undo entries that refer to it.
// The set's whole-set lock protects it.
type Chain struct {
	head *Entry
	n    int
}

func (c *Chain) push(e *Entry) {
	e.next = c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	c.n++
}

func (c *Chain) remove(e *Entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
	c.n--
}

// Each calls f for every entry of the chain; f may Detach the entry it is
// given.
func (c *Chain) Each(f func(*Entry)) {
	for e := c.head; e != nil; {
		next := e.next
		f(e)
		e = next
	}
}

// Len returns the number of entries.
func (c *Chain) Len() int { return c.n }
