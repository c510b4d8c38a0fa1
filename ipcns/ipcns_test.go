package ipcns

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The rules here are also checked against the kernel through the engines'
// differential tests; these pin the pieces down on their own.

func TestPermCheck(t *testing.T) {
	p := Perm{UID: 10, GID: 20, CUID: 11, CGID: 21, Mode: 0o640}
	cases := []struct {
		name   string
		c      Creds
		access int
		want   error
	}{
		{"owner read", UserCreds(10, 99), ReadAccess, nil},
		{"owner write", UserCreds(10, 99), WriteAccess, nil},
		{"creator is owner class", UserCreds(11, 99), WriteAccess, nil},
		{"group read", UserCreds(5, 20), ReadAccess, nil},
		{"group write denied", UserCreds(5, 20), WriteAccess, unix.EACCES},
		{"creator group via supplementary", UserCreds(5, 99, 21), ReadAccess, nil},
		{"other denied", UserCreds(5, 99), ReadAccess, unix.EACCES},
		{"get flag 0 always allowed", UserCreds(5, 99), 0, nil},
		{"CAP_IPC_OWNER bypass", Creds{EUID: 5, Caps: 1 << CapIPCOwner}, WriteAccess, nil},
		// The group check uses the fsgid, not the egid.
		{"fsgid counts", Creds{EUID: 5, EGID: 99, FSGID: 20}, ReadAccess, nil},
		{"egid alone does not", Creds{EUID: 5, EGID: 20, FSGID: 99}, ReadAccess, unix.EACCES},
	}
	for _, c := range cases {
		if got := p.Check(&c.c, c.access); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLiveCaps checks that live capabilities are read only where the ids
// and mode bits refuse (as the kernel calls ns_capable), and win over the
// cached set.
func TestLiveCaps(t *testing.T) {
	p := Perm{UID: 10, GID: 20, CUID: 10, CGID: 20, Mode: 0o600}
	asked := 0
	live := AllCaps
	c := Creds{EUID: 10, Caps: AllCaps, LiveCaps: func() CapSet { asked++; return live }}
	if err := p.Check(&c, WriteAccess); err != nil || asked != 0 {
		t.Fatalf("owner: %v, asked %d", err, asked)
	}
	if err := p.CheckOwner(&c); err != nil || asked != 0 {
		t.Fatalf("owner IPC_SET: %v, asked %d", err, asked)
	}
	c.EUID = 99
	live = 0 // dropped by capset: the cached AllCaps must not count
	if err := p.Check(&c, ReadAccess); err != unix.EACCES || asked != 1 {
		t.Fatalf("other after capset: %v, asked %d", err, asked)
	}
	if err := p.CheckOwner(&c); err != unix.EPERM || asked != 2 {
		t.Fatalf("other IPC_RMID after capset: %v, asked %d", err, asked)
	}
	live = 1 << CapIPCOwner
	if err := p.Check(&c, ReadAccess); err != nil {
		t.Fatalf("other with CAP_IPC_OWNER: %v", err)
	}
}

func TestCheckOwnerAndUpdated(t *testing.T) {
	p := Perm{UID: 10, GID: 20, CUID: 11, CGID: 21, Mode: 0o640}
	for _, c := range []Creds{UserCreds(10, 0), UserCreds(11, 0), {EUID: 5, Caps: 1 << CapSysAdmin}} {
		if err := p.CheckOwner(&c); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := p.CheckOwner(&Creds{EUID: 5, Caps: 1 << CapIPCOwner}); err != unix.EPERM {
		t.Errorf("CAP_IPC_OWNER is not enough for IPC_SET/RMID: %v", err)
	}
	q, err := p.Updated(1, 2, 0o1777)
	if err != nil || q.UID != 1 || q.GID != 2 || q.Mode != 0o777 || q.CUID != 11 {
		t.Errorf("Updated: %+v %v", q, err)
	}
	if _, err := p.Updated(^uint32(0), 2, 0); err != unix.EINVAL {
		t.Errorf("uid -1: %v", err)
	}
}

func TestPidIn(t *testing.T) {
	root := NewPidNamespace(nil, 1)
	child := NewPidNamespace(root, 2)
	grandchild := NewPidNamespace(child, 3)
	sibling := NewPidNamespace(root, 4)
	p := NewPid(grandchild, 1000, 50, 1)
	for _, c := range []struct {
		ns   *PidNamespace
		want int32
	}{{root, 1000}, {child, 50}, {grandchild, 1}, {sibling, 0}, {NewPidNamespace(grandchild, 5), 0}} {
		if got := p.In(c.ns); got != c.want {
			t.Errorf("In(ns %d) = %d, want %d", c.ns.ID, got, c.want)
		}
	}
	var nilPid *Pid
	if nilPid.In(root) != 0 {
		t.Error("nil handle must read 0")
	}
	var slot *Pid
	StorePid(&slot, p)
	if slot != p {
		t.Error("StorePid did not store")
	}
}

func TestSetSem(t *testing.T) {
	l := DefaultLimits()
	if err := l.SetSem("250 32000 32 128"); err != nil || l.SemMSL != 250 || l.SemMNS != 32000 || l.SemOPM != 32 || l.SemMNI != 128 {
		t.Fatalf("%+v %v", l, err)
	}
	if l.SemString() != "250\t32000\t32\t128" {
		t.Errorf("SemString %q", l.SemString())
	}
	for _, bad := range []string{"1 2 3", "1 2 3 x", "1 2 3 -1", "1 2 3 32769"} {
		if err := l.SetSem(bad); err == nil {
			t.Errorf("SetSem(%q) accepted", bad)
		}
	}
}

type obj struct{ Header }

// TestRegistryIDs: ids are seq<<15|idx, the index cycles over
// max(in_use*3/2, 64) slots and the sequence number goes up at each wrap,
// a stale id is EINVAL, and next_id is used once.
func TestRegistryIDs(t *testing.T) {
	r := NewRegistry[obj, *obj]()
	c := RootCreds()
	ops := GetOps[*obj]{New: func(Perm) (*obj, error) { return &obj{}, nil }}
	get := func() int32 {
		id, err := r.Get(&c, IPCPrivate, 0o600, 32000, ops)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i := 0; i < 64; i++ {
		id := get()
		if id != int32(i) {
			t.Fatalf("id %d, want %d", id, i)
		}
		o, _ := r.Lookup(id)
		r.Remove(o)
	}
	if id := get(); id != 1<<15 {
		t.Fatalf("after wrap: id %d, want %d", id, 1<<15)
	}
	if _, err := r.Lookup(0); err != unix.EINVAL {
		t.Errorf("stale id 0: %v", err)
	}
	if o, err := r.LookupIndex(0); err != nil || o.ID() != 1<<15 {
		t.Errorf("LookupIndex(0): %v %v", o, err)
	}
	r.SetNextID(3<<15 | 7)
	if id := get(); id != 3<<15|7 {
		t.Errorf("next_id: %d", id)
	}
	if r.NextID() != -1 {
		t.Errorf("next_id not consumed: %d", r.NextID())
	}
	if r.InUse() != 2 || r.MaxIndex() != 7 {
		t.Errorf("in use %d, max index %d", r.InUse(), r.MaxIndex())
	}
}
