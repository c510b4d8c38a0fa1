package gateway_test

import (
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
	"golang.org/x/sys/unix"
)

// TestDecode pins the number tables: what is served, what the kernel runs
// after a note (namespace and group changes, ipc(2)'s shm calls), and
// what is refused, on every architecture a container's filter can report.
func TestDecode(t *testing.T) {
	const x32 = 0x40000000
	for _, c := range []struct {
		arch    uint32
		nr      int32
		arg0    uint64
		sys     gateway.Sysno
		verdict gateway.Verdict
	}{
		{unix.AUDIT_ARCH_X86_64, unix.SYS_SEMTIMEDOP, 0, gateway.SysSemtimedop, gateway.Serve},
		{unix.AUDIT_ARCH_X86_64, unix.SYS_MSGRCV, 0, gateway.SysMsgrcv, gateway.Serve},
		{unix.AUDIT_ARCH_X86_64, unix.SYS_UNSHARE, 0, gateway.SysNSChange, gateway.Continue},
		{unix.AUDIT_ARCH_X86_64, unix.SYS_SETGROUPS, 0, gateway.SysGroupsChange, gateway.Continue},
		{unix.AUDIT_ARCH_X86_64, unix.SYS_GETPID, 0, gateway.SysUnknown, gateway.Refuse},
		{unix.AUDIT_ARCH_X86_64, x32 | unix.SYS_SEMGET, 0, gateway.SysUnknown, gateway.Refuse},
		{unix.AUDIT_ARCH_X86_64, x32 | unix.SYS_SETNS, 0, gateway.SysNSChange, gateway.Continue},
		{unix.AUDIT_ARCH_X86_64, x32 | unix.SYS_SETGROUPS, 0, gateway.SysGroupsChange, gateway.Continue},
		{unix.AUDIT_ARCH_AARCH64, 193, 0, gateway.SysSemop, gateway.Serve},
		{unix.AUDIT_ARCH_AARCH64, 268, 0, gateway.SysNSChange, gateway.Continue},
		{unix.AUDIT_ARCH_AARCH64, 159, 0, gateway.SysGroupsChange, gateway.Continue},
		{unix.AUDIT_ARCH_ARM, 375, 0, gateway.SysNSChange, gateway.Continue},
		{unix.AUDIT_ARCH_ARM, 206, 0, gateway.SysGroupsChange, gateway.Continue},
		{unix.AUDIT_ARCH_ARM, 300, 0, gateway.SysUnknown, gateway.Refuse}, // semop on arm
		{unix.AUDIT_ARCH_I386, 310, 0, gateway.SysNSChange, gateway.Continue},
		{unix.AUDIT_ARCH_I386, 81, 0, gateway.SysGroupsChange, gateway.Continue},
		{unix.AUDIT_ARCH_I386, 117, 23, gateway.SysUnknown, gateway.Continue}, // ipc(SHMGET)
		{unix.AUDIT_ARCH_I386, 117, 1, gateway.SysUnknown, gateway.Refuse},    // ipc(SEMOP)
		{unix.AUDIT_ARCH_I386, 393, 0, gateway.SysUnknown, gateway.Refuse},    // semget
	} {
		d := seccompnotify.Data{Nr: c.nr, Arch: c.arch}
		d.Args[0] = c.arg0
		sys, v := gateway.Decode(&d)
		if sys != c.sys || v != c.verdict {
			t.Errorf("arch %#x nr %d arg0 %d: %v/%d, want %v/%d", c.arch, c.nr, c.arg0, sys, v, c.sys, c.verdict)
		}
	}
}
