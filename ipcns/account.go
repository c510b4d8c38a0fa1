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

// ErrTextsLive is SetAccount's error for a TextStore that would replace
// another whose texts are live.
var ErrTextsLive = errors.New("ipcns: texts of the namespace's text store are live")

// ErrNoMemory is the error of an Account that could not take a charge;
// the engines answer ENOMEM where Linux's allocation would fail.
var ErrNoMemory = errors.New("ipcns: the pod's memory cannot hold the object")

// TextStore is an Account that also holds message text outside the
// shim's heap, in memory that is itself the charge (shim/memcharge's
// arena): a text kept there is not charged a second time, and the host
// holds it once.
type TextStore interface {
	// AllocText returns n bytes for a text. ErrNoMemory: the pod's
	// memory cannot hold them; another error: the store cannot take
	// the text now, which then goes to the heap, charged as usual.
	// With grow false it takes only memory the store already holds
	// (no allocation in the pod) and fails otherwise.
	AllocText(n int, grow bool) ([]byte, error)
	// FreeText gives a text back, and reports false if it is not one
	// of the store's.
	FreeText(t []byte) bool
}

// charge is a Resources' accounting; mu orders SetAccount against
// charges so that the account receives exactly what is outstanding.
type charge struct {
	mu      sync.RWMutex
	account Account // guarded by mu
	// texts is the last TextStore the account was: it stays after the
	// account changes, so that its texts can be given back to it.
	texts   TextStore // guarded by mu
	charged atomic.Int64
	// text counts the bytes of texts held by texts (not in charged:
	// they are not moved with the account).
	text atomic.Int64
}

// SetAccount makes a charge everything the namespace's objects hold from
// now on, starting with what they hold already. An account that is a
// TextStore cannot replace another while texts of that one are live
// (ErrTextsLive): they could not be given back to it.
func (ns *Resources) SetAccount(a Account) error {
	ns.charge.mu.Lock()
	defer ns.charge.mu.Unlock()
	if ts, ok := a.(TextStore); ok && ns.charge.texts != nil && ts != ns.charge.texts && ns.charge.text.Load() != 0 {
		return ErrTextsLive
	}
	if a != nil {
		if err := a.Charge(ns.charge.charged.Load()); err != nil {
			return err
		}
	}
	if old := ns.charge.account; old != nil {
		old.Uncharge(ns.charge.charged.Load())
	}
	ns.charge.account = a
	if ts, ok := a.(TextStore); ok {
		ns.charge.texts = ts
	}
	return nil
}

// Charge accounts bytes that an object of the namespace is about to hold.
// It fails with ErrNoMemory if the namespace's account refuses them.
func (ns *Resources) Charge(bytes int64) error {
	ns.charge.mu.RLock()
	defer ns.charge.mu.RUnlock()
	return ns.chargeRLocked(bytes)
}

func (ns *Resources) chargeRLocked(bytes int64) error {
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
// accounting, message text included.
func (ns *Resources) Charged() int64 {
	return ns.charge.charged.Load() + ns.charge.text.Load()
}

// AllocText returns n bytes for a message text (load_msg's allocation),
// charged: in the account's TextStore if it has one, else in the heap
// with a Charge. It fails with ErrNoMemory where the charge is refused.
// The text must be given back with FreeText, once.
func (ns *Resources) AllocText(n int64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	ns.charge.mu.RLock()
	defer ns.charge.mu.RUnlock()
	if ts, ok := ns.charge.account.(TextStore); ok {
		t, err := ts.AllocText(int(n), true)
		if err == nil {
			ns.charge.text.Add(n)
			return t, nil
		}
		if errors.Is(err, ErrNoMemory) {
			return nil, err
		}
	}
	if err := ns.chargeRLocked(n); err != nil {
		return nil, err
	}
	return make([]byte, n), nil
}

// TryAllocText returns n bytes for a message text from memory the
// account's TextStore already holds, or false: it never allocates in the
// pod (no reclaim, no OOM kill), so a call may take it before the checks
// that could fail it. The text must be given back with FreeText, once.
func (ns *Resources) TryAllocText(n int64) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	ns.charge.mu.RLock()
	defer ns.charge.mu.RUnlock()
	ts, ok := ns.charge.account.(TextStore)
	if !ok {
		return nil, false
	}
	t, err := ts.AllocText(int(n), false)
	if err != nil {
		return nil, false
	}
	ns.charge.text.Add(n)
	return t, true
}

// FreeText gives back a text AllocText returned.
func (ns *Resources) FreeText(t []byte) {
	if len(t) == 0 {
		return
	}
	ns.charge.mu.RLock()
	ts := ns.charge.texts
	ns.charge.mu.RUnlock()
	if ts != nil && ts.FreeText(t) {
		ns.charge.text.Add(-int64(len(t)))
		return
	}
	ns.Uncharge(int64(len(t)))
}
