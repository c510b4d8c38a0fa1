package ipcns

import "golang.org/x/sys/unix"

// Flags shared by every *get call and the IPC ctl commands
// (include/uapi/linux/ipc.h).
const (
	IPCPrivate = 0 // IPC_PRIVATE key

	IPCCreat  = 0o1000
	IPCExcl   = 0o2000
	IPCNoWait = 0o4000

	IPCRmid = 0
	IPCSet  = 1
	IPCStat = 2
	IPCInfo = 3

	// IPC64 is the flag 32-bit libcs or into ctl commands to ask for the
	// 64-bit structures. x86_64 and arm64 do not parse it: there semctl
	// and msgctl with cmd|IPC64 fail with EINVAL like any unknown command
	// (measured), and glibc never sets it.
	IPC64 = 0x0100
)

// Access modes for Check, as the kernel's S_IRUGO / S_IWUGO.
const (
	ReadAccess  = 0o444
	WriteAccess = 0o222
	modeMask    = 0o777 // S_IRWXUGO
)

// Perm is the kernel's struct kern_ipc_perm as a value: the ipc_perm that
// IPC_STAT reports. A Perm is never changed in place; IPC_SET installs a new
// one (see Header).
type Perm struct {
	Key        int32
	UID, GID   uint32
	CUID, CGID uint32
	Mode       uint16 // the low 9 bits are the permission bits
	Seq        uint16
}

// Check is the kernel's ipcperms: access is the requested mode (a *get's
// flag argument or ReadAccess/WriteAccess); the owner or creator is checked
// against the user bits, a member of the owner or creator group against the
// group bits, everyone else against the other bits, and CAP_IPC_OWNER passes
// every check. It returns EACCES when access is denied.
func (p *Perm) Check(c *Creds, access int) error {
	requested := (access >> 6) | (access >> 3) | access
	granted := int(p.Mode)
	if c.EUID == p.CUID || c.EUID == p.UID {
		granted >>= 6
	} else if c.inGroup(p.CGID) || c.inGroup(p.GID) {
		granted >>= 3
	}
	if requested&^granted&0o7 != 0 && !c.Capable(CapIPCOwner) {
		return unix.EACCES
	}
	return nil
}

// CheckOwner is the kernel's ipcctl_obtain_check rule for IPC_SET and
// IPC_RMID: the caller must be the owner or the creator, or hold
// CAP_SYS_ADMIN. It returns EPERM otherwise.
func (p *Perm) CheckOwner(c *Creds) error {
	if c.EUID == p.CUID || c.EUID == p.UID || c.Capable(CapSysAdmin) {
		return nil
	}
	return unix.EPERM
}

// Updated is the kernel's ipc_update_perm: the Perm IPC_SET installs from
// the caller's uid, gid and mode. An invalid id ((uid_t)-1) gives EINVAL.
func (p Perm) Updated(uid, gid uint32, mode uint16) (Perm, error) {
	if uid == ^uint32(0) || gid == ^uint32(0) {
		return p, unix.EINVAL
	}
	p.UID, p.GID = uid, gid
	p.Mode = p.Mode&^modeMask | mode&modeMask
	return p, nil
}
