package ipcns

import (
	"errors"
	"sync"
	"sync/atomic"
)

// Account is where the memory a namespace's objects hold is charged: the
// kernel charges sem_array, sem_undo and msg_msg to the memory cgroup of
// the task that allocates them (GFP_KERNEL_ACCOUNT), so that a container
// filling queues is refused, or OOM-killed, within its own limit. The
// shim's account (shim/memcharge) makes the bytes real in the memory
// cgroup of the pod that owns the namespace.
type Account interface {
	// Charge adds bytes, or fails (ErrNoMemory) if the pod's memory cannot
	// hold them.
	Charge(bytes int64) error
	// Uncharge gives bytes back.
	Uncharge(bytes int64)
}

// ErrNoMemory is the error of an Account that could not take a charge;
// the engines answer ENOMEM where Linux's allocation would fail.
var ErrNoMemory = errors.New("ipcns: the pod's memory cannot hold the object")

// charge is a Resources' accounting; mu orders SetAccount against
// charges so that the account receives exactly what is outstanding.
type charge struct {
	mu      sync.RWMutex
	account Account // guarded by mu
	charged atomic.Int64
}

// SetAccount makes a charge everything the namespace's objects hold from
// now on, starting with what they hold already.
func (ns *Resources) SetAccount(a Account) error {
	ns.charge.mu.Lock()
	defer ns.charge.mu.Unlock()
	if a != nil {
		if err := a.Charge(ns.charge.charged.Load()); err != nil {
			return err
		}
	}
	if old := ns.charge.account; old != nil {
		old.Uncharge(ns.charge.charged.Load())
	}
	ns.charge.account = a
	return nil
}

// Charge accounts bytes that an object of the namespace is about to hold.
// It fails with ErrNoMemory if the namespace's account refuses them.
func (ns *Resources) Charge(bytes int64) error {
	ns.charge.mu.RLock()
	defer ns.charge.mu.RUnlock()
	if a := ns.charge.account; a != nil {
		if err := a.Charge(bytes); err != nil {
			return err
		}
	}
	ns.charge.charged.Add(bytes)
	return nil
}

// Uncharge gives back bytes an object held.
func (ns *Resources) Uncharge(bytes int64) {
	ns.charge.mu.RLock()
	defer ns.charge.mu.RUnlock()
	ns.charge.charged.Add(-bytes)
	if a := ns.charge.account; a != nil {
		a.Uncharge(bytes)
	}
}

// Charged returns the bytes the namespace's objects hold by the engines'
// accounting.
func (ns *Resources) Charged() int64 { return ns.charge.charged.Load() }
