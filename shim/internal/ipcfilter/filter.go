// Package ipcfilter builds the classic BPF seccomp program that traps the
// System V semaphore and message-queue calls with SECCOMP_RET_USER_NOTIF,
// and installs it. In production runc builds the equivalent program from
// the OCI config; this one stands in for it in tests and benchmarks, and
// documents which entry points must be trapped.
//
// Every way into the kernel's IPC namespace for sem and msg is trapped,
// so that a process cannot bypass the engine by choosing another calling
// convention:
//
//   - AUDIT_ARCH_X86_64, native numbers: semget 64, semop 65, semctl 66,
//     msgget 68, msgsnd 69, msgrcv 70, msgctl 71, semtimedop 220.
//   - AUDIT_ARCH_X86_64 with __X32_SYSCALL_BIT (x32 ABI): the same numbers
//     with bit 30 set. The bit is masked off before comparing, so x32
//     calls are trapped whether or not the kernel has CONFIG_X86_X32_ABI;
//     the gateway refuses them (ENOSYS): x32 has its own struct layouts
//     and no container runs it.
//   - AUDIT_ARCH_I386 (a 32-bit process, or a 64-bit one executing
//     int $0x80): the ipc(2) multiplexer 117 and the direct calls added in
//     Linux 5.1 (semget 393, semctl 394, msgget 399, msgsnd 400, msgrcv
//     401, msgctl 402, semtimedop_time64 420). The gateway refuses the
//     sem and msg calls with ENOSYS and lets the kernel run ipc(2)'s shm
//     sub-calls, which the shim does not emulate.
//   - Any other architecture value kills the process: on an x86_64 kernel
//     no other value can occur.
//
// unshare and setns (x86_64 272 and 308, i386 310 and 346) are trapped
// so that the gateway learns of IPC namespace changes, and setgroups
// (x86_64 116, i386 81 and 206) so that it learns of group changes; it
// lets them run.
//
// shm* calls (shmget 29, shmat 30, shmctl 31, shmdt 67) are not trapped:
// shared memory stays with the kernel.
package ipcfilter

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// X32SyscallBit is __X32_SYSCALL_BIT.
const X32SyscallBit = 0x40000000

// Native x86_64 numbers of the trapped calls. unshare and setns, the
// only calls that move an existing thread to another IPC namespace, are
// trapped too: the gateway then caches each thread's namespace instead of
// rereading it on every IPC call, and lets these two run (CONTINUE);
// setgroups likewise makes it forget the thread's cached groups.
var X86_64 = []uint32{
	unix.SYS_SEMGET, unix.SYS_SEMOP, unix.SYS_SEMCTL, unix.SYS_SEMTIMEDOP,
	unix.SYS_MSGGET, unix.SYS_MSGSND, unix.SYS_MSGRCV, unix.SYS_MSGCTL,
	unix.SYS_UNSHARE, unix.SYS_SETNS, unix.SYS_SETGROUPS,
	unix.SYS_SETUID, unix.SYS_SETGID, unix.SYS_SETREUID, unix.SYS_SETREGID,
	unix.SYS_SETRESUID, unix.SYS_SETRESGID, unix.SYS_SETFSUID, unix.SYS_SETFSGID,
}

// I386 numbers of the trapped calls: ipc(2), the direct calls, unshare
// (310), setns (346), setgroups (81) and setgroups32 (206), and the setuid
// family (16- and 32-bit ids).
var I386 = []uint32{117, 393, 394, 399, 400, 401, 402, 420, 310, 346, 81, 206,
	23, 46, 70, 71, 138, 139, 164, 170, 203, 204, 208, 210, 213, 214, 215, 216}

// offset of the fields of struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
)

// asm is a tiny assembler for forward jumps to labels.
type asm struct {
	prog   []unix.SockFilter
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at     int
	jt, jf string
}

func (a *asm) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

// jump appends a conditional jump; "" means the next instruction.
func (a *asm) jump(code uint16, k uint32, jt, jf string) {
	a.fixups = append(a.fixups, fixup{at: len(a.prog), jt: jt, jf: jf})
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *asm) label(name string) { a.labels[name] = len(a.prog) }

func (a *asm) link() ([]unix.SockFilter, error) {
	for _, f := range a.fixups {
		for _, l := range []struct {
			name string
			off  *uint8
		}{{f.jt, &a.prog[f.at].Jt}, {f.jf, &a.prog[f.at].Jf}} {
			if l.name == "" {
				continue
			}
			to, ok := a.labels[l.name]
			d := to - f.at - 1
			if !ok || d < 0 || d > 255 {
				return nil, fmt.Errorf("ipcfilter: bad jump to %q", l.name)
			}
			*l.off = uint8(d)
		}
	}
	return a.prog, nil
}

// Program returns the filter described in the package comment.
func Program() ([]unix.SockFilter, error) {
	a := &asm{labels: map[string]int{}}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		and = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	a.stmt(ld, offArch)
	a.jump(jeq, unix.AUDIT_ARCH_X86_64, "x86_64", "")
	a.jump(jeq, unix.AUDIT_ARCH_I386, "i386", "kill")

	a.label("x86_64")
	a.stmt(ld, offNr)
	// x32: compare without the bit, so both ABIs share the list.
	a.stmt(and, ^uint32(X32SyscallBit))
	for _, nr := range X86_64 {
		a.jump(jeq, nr, "notify", "")
	}
	a.stmt(ret, unix.SECCOMP_RET_ALLOW)

	a.label("i386")
	a.stmt(ld, offNr)
	for _, nr := range I386 {
		a.jump(jeq, nr, "notify", "")
	}
	a.stmt(ret, unix.SECCOMP_RET_ALLOW)

	a.label("notify")
	a.stmt(ret, unix.SECCOMP_RET_USER_NOTIF)
	a.label("kill")
	a.stmt(ret, unix.SECCOMP_RET_KILL_PROCESS)
	return a.link()
}

// Install sets no_new_privs and installs Program on every thread of the
// calling process (SECCOMP_FILTER_FLAG_TSYNC, which a Go process needs:
// its runtime has several threads), returning the listener fd. The fd is
// close-on-exec.
func Install() (int, error) {
	prog, err := Program()
	if err != nil {
		return -1, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// TSYNC and NEW_LISTENER may be combined only with TSYNC_ESRCH (a
	// failed sync then reports ESRCH instead of a thread id, which would
	// be ambiguous with the listener fd).
	flags := unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH
	fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(flags), uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return -1, fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", errno)
	}
	return int(fd), nil
}
