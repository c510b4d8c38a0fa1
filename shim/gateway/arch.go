package gateway

import (
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
	"golang.org/x/sys/unix"
)

// Sysno names a served system call independently of the architecture.
type Sysno int

// The served calls.
const (
	SysUnknown Sysno = iota
	SysSemget
	SysSemop
	SysSemctl
	SysSemtimedop
	SysMsgget
	SysMsgsnd
	SysMsgrcv
	SysMsgctl
	// SysNSChange is unshare or setns: not served, but a sign that the
	// thread's IPC namespace may change (see Gateway.NSCallsTrapped).
	SysNSChange
	// SysGroupsChange is setgroups: not served, but a sign that the
	// thread's supplementary groups may change.
	SysGroupsChange
	// SysIDChange is the setuid family: not served, but a sign that the
	// thread's ids may change.
	SysIDChange
)

var sysnoNames = [...]string{"unknown", "semget", "semop", "semctl", "semtimedop", "msgget", "msgsnd", "msgrcv", "msgctl", "unshare/setns", "setgroups", "setuid"}

// changesIdentity reports whether the call is one the gateway notes
// because it may change what it caches about the thread.
func (s Sysno) changesIdentity() bool {
	return s == SysNSChange || s == SysGroupsChange || s == SysIDChange
}

// idCalls64 are the setuid family on x86_64 (and x32) and arm64:
// setuid setgid setreuid setregid setresuid setresgid setfsuid setfsgid.
var (
	idCallsX86_64  = map[int32]bool{105: true, 106: true, 113: true, 114: true, 117: true, 119: true, 122: true, 123: true}
	idCallsAArch64 = map[int32]bool{146: true, 144: true, 145: true, 143: true, 147: true, 149: true, 151: true, 152: true}
)

// String returns the call's name.
func (s Sysno) String() string {
	if s < 0 || int(s) >= len(sysnoNames) {
		return "invalid"
	}
	return sysnoNames[s]
}

// Verdict says what to do with a trapped call before any handler sees it.
type Verdict int

// Verdicts of Decode.
const (
	// Serve: a served call, Sysno says which.
	Serve Verdict = iota
	// Refuse: answer ENOSYS. Calling conventions the gateway does not
	// emulate (x32, i386 and ipc(2)'s sem and msg sub-calls, unknown
	// numbers) fail clearly instead of reaching the kernel's IPC
	// namespace, which the container must not see.
	Refuse
	// Continue: let the kernel run the call (ipc(2)'s shm sub-calls,
	// which the shim does not emulate and the filter had to trap along
	// with the rest of ipc(2); unshare and setns, after noting them).
	Continue
)

// AUDIT_ARCH values and the x32 bit.
const (
	archX86_64  = unix.AUDIT_ARCH_X86_64
	archI386    = unix.AUDIT_ARCH_I386
	archAArch64 = unix.AUDIT_ARCH_AARCH64
	archARM     = unix.AUDIT_ARCH_ARM
	x32Bit      = 0x40000000
	i386IPC     = 117
)

// compatNoted are the numbers, on the 32-bit architectures, of the calls
// the gateway notes and lets run: unshare and setns, setgroups (16-bit
// ids) and setgroups32. The profile traps them by name on its compat
// architectures too (arch/arm/tools/syscall.tbl,
// arch/x86/entry/syscalls/syscall_32.tbl).
var compatNoted = map[uint32]map[int32]Sysno{
	archARM:  withIDCalls32(map[int32]Sysno{337: SysNSChange, 375: SysNSChange, 81: SysGroupsChange, 206: SysGroupsChange}),
	archI386: withIDCalls32(map[int32]Sysno{310: SysNSChange, 346: SysNSChange, 81: SysGroupsChange, 206: SysGroupsChange}),
}

// withIDCalls32 adds the setuid family, 16- and 32-bit id variants, whose
// numbers i386 and arm share: setuid 23, setgid 46, setreuid 70, setregid
// 71, setfsuid 138, setfsgid 139, setresuid 164, setresgid 170, and the
// *32 calls 203, 204, 208, 210, 213, 214, 215, 216.
func withIDCalls32(m map[int32]Sysno) map[int32]Sysno {
	for _, nr := range []int32{23, 46, 70, 71, 138, 139, 164, 170, 203, 204, 208, 210, 213, 214, 215, 216} {
		m[nr] = SysIDChange
	}
	return m
}

// Decode maps a notification's arch and number to a served call.
//
// x86_64 and arm64 native numbers are served (the structs of the two
// are the same 64-bit layouts). Everything else is refused:
//   - x32 (x86_64 with __X32_SYSCALL_BIT): different layouts, unsupported;
//   - i386 direct calls and ipc(2)'s SEMOP..MSGCTL sub-calls: 32-bit
//     layouts, unsupported; ipc(2)'s shm sub-calls continue to the kernel.
func Decode(d *seccompnotify.Data) (Sysno, Verdict) {
	switch d.Arch {
	case archX86_64:
		if d.Nr&x32Bit != 0 {
			switch d.Nr &^ x32Bit { // same numbers in x32's table
			case unix.SYS_UNSHARE, unix.SYS_SETNS:
				return SysNSChange, Continue
			case unix.SYS_SETGROUPS:
				return SysGroupsChange, Continue
			}
			if idCallsX86_64[d.Nr&^x32Bit] {
				return SysIDChange, Continue
			}
			return SysUnknown, Refuse
		}
		if idCallsX86_64[d.Nr] {
			return SysIDChange, Continue
		}
		switch d.Nr {
		case unix.SYS_SEMGET:
			return SysSemget, Serve
		case unix.SYS_SEMOP:
			return SysSemop, Serve
		case unix.SYS_SEMCTL:
			return SysSemctl, Serve
		case unix.SYS_SEMTIMEDOP:
			return SysSemtimedop, Serve
		case unix.SYS_MSGGET:
			return SysMsgget, Serve
		case unix.SYS_MSGSND:
			return SysMsgsnd, Serve
		case unix.SYS_MSGRCV:
			return SysMsgrcv, Serve
		case unix.SYS_MSGCTL:
			return SysMsgctl, Serve
		case unix.SYS_UNSHARE, unix.SYS_SETNS:
			return SysNSChange, Continue
		case unix.SYS_SETGROUPS:
			return SysGroupsChange, Continue
		}
	case archAArch64:
		// include/uapi/asm-generic/unistd.h
		switch d.Nr {
		case 186:
			return SysMsgget, Serve
		case 187:
			return SysMsgctl, Serve
		case 188:
			return SysMsgrcv, Serve
		case 189:
			return SysMsgsnd, Serve
		case 190:
			return SysSemget, Serve
		case 191:
			return SysSemctl, Serve
		case 192:
			return SysSemtimedop, Serve
		case 193:
			return SysSemop, Serve
		case 97, 268: // unshare, setns
			return SysNSChange, Continue
		case 159: // setgroups
			return SysGroupsChange, Continue
		}
		if idCallsAArch64[d.Nr] {
			return SysIDChange, Continue
		}
	case archARM:
		if s, ok := compatNoted[archARM][d.Nr]; ok {
			return s, Continue
		}
	case archI386:
		if s, ok := compatNoted[archI386][d.Nr]; ok {
			return s, Continue
		}
		if d.Nr == i386IPC {
			// ipc(call, ...): SHMAT 21, SHMDT 22, SHMGET 23, SHMCTL 24;
			// the high 16 bits of call are a version.
			if c := d.Args[0] & 0xffff; c >= 21 && c <= 24 {
				return SysUnknown, Continue
			}
		}
	}
	return SysUnknown, Refuse
}
