package ipcns

// Capability numbers from include/uapi/linux/capability.h that the IPC code
// consults.
const (
	CapIPCOwner    = 15 // bypass ipc_perm mode checks
	CapSysAdmin    = 21 // IPC_SET and IPC_RMID on objects one does not own
	CapSysResource = 24 // raise msg_qbytes above msgmnb
)

// CapSet is a set of effective capabilities, bit n standing for capability n.
type CapSet uint64

// Has reports whether capability c is in the set.
func (s CapSet) Has(c int) bool { return s&(1<<uint(c)) != 0 }

// AllCaps is the effective set of a root process with every capability.
const AllCaps CapSet = 1<<41 - 1

// Creds are the credentials of a calling thread, as the kernel's struct cred
// holds them, already mapped into the ids this namespace stores. Caps are the
// caller's effective capabilities in the user namespace that owns the IPC
// namespace (the kernel's ns_capable(ns->user_ns, ...)).
type Creds struct {
	EUID  uint32 // owner checks and the uid/cuid of new objects
	EGID  uint32 // gid/cgid of new objects
	FSGID uint32 // group checks: in_group_p tests the fsgid, then Groups
	// Groups are the supplementary groups.
	Groups []uint32
	Caps   CapSet
	// LiveCaps, when not nil, is asked instead of Caps each time a
	// capability decides a check, which the kernel does only where the
	// ids and mode bits alone would refuse. A caller whose capabilities
	// can change behind a cached Creds (capset(2) changes no id) reads
	// them there, on the rare path, rather than on every call.
	LiveCaps func() CapSet
}

// Capable reports whether the caller holds capability cap now (the
// kernel's ns_capable in the namespace's user namespace).
func (c *Creds) Capable(cap int) bool {
	if c.LiveCaps != nil {
		return c.LiveCaps().Has(cap)
	}
	return c.Caps.Has(cap)
}

// RootCreds returns the credentials of uid 0 with every capability.
func RootCreds() Creds { return Creds{Caps: AllCaps} }

// UserCreds returns the credentials of an unprivileged uid/gid.
func UserCreds(uid, gid uint32, groups ...uint32) Creds {
	return Creds{EUID: uid, EGID: gid, FSGID: gid, Groups: groups}
}

// inGroup is the kernel's in_group_p: the fsgid or a supplementary group.
func (c *Creds) inGroup(gid uint32) bool {
	if c.FSGID == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}
