package gateway

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxCopy bounds one copy from or to a caller (the largest legitimate one
// is SETALL/GETALL of SEMMSL semaphores, 64000 bytes, or a msgmax
// message); larger requests fail with the errno the handler chooses
// before copying.
const MaxCopy = 1 << 22

// ReadMem copies len(b) bytes at addr in t's memory into b. Any failure
// (unmapped or PROT_NONE memory, a partial copy, a dead task) is EFAULT,
// as the kernel's copy_from_user would report.
//
// The copy is process_vm_readv(2) on the thread's tid. Unlike
// /proc/<tid>/mem (FOLL_FORCE) it honours page protections: reading a
// PROT_NONE page fails, as the native call would. The binding to the task
// is the TOCTOU rule's: the tid names the Task's task while the Task's
// pidfd says it is alive, which the caller establishes before (Resolve,
// Request.Valid) and confirms after the access (Request.Valid, or the
// SEND that fails with ENOENT if the task has gone; an operation whose
// answer is refused is undone).
func (t *Task) ReadMem(addr uint64, b []byte) error {
	return t.vmIO(addr, b, false)
}

// WriteMem copies b to addr in t's memory; failures are EFAULT. It
// honours protections (process_vm_writev(2)): read-only and PROT_NONE
// pages fail as the kernel's copy_to_user would.
//
// A write cannot be taken back, so handlers check the notification
// (Request.Valid) just before writing. The residual window between that
// check and the write is a task killed in those microseconds *and* its
// tid reused by a new task, which needs the pid allocator to wrap around
// pid_max in between.
func (t *Task) WriteMem(addr uint64, b []byte) error {
	return t.vmIO(addr, b, true)
}

// WriteMem2 writes a then b contiguously at addr with one
// process_vm_writev (msgrcv's mtype and text). It returns the number of
// bytes written and EFAULT if not all were.
func (t *Task) WriteMem2(addr uint64, a, b []byte) (int, error) {
	return t.vmIO2(addr, a, b, true)
}

// ReadMem2 fills a then b from addr with one process_vm_readv (msgsnd's
// mtype and text, each in a buffer of its own size: the text is kept as
// the message). Like ReadMem, a partial copy is EFAULT.
func (t *Task) ReadMem2(addr uint64, a, b []byte) error {
	_, err := t.vmIO2(addr, a, b, false)
	return err
}

func (t *Task) vmIO2(addr uint64, a, b []byte, write bool) (int, error) {
	n := len(a) + len(b)
	if n == 0 {
		return 0, nil
	}
	if !validRange(addr, n) || !t.alive() {
		return 0, unix.EFAULT
	}
	liov := [2]unix.Iovec{{Len: uint64(len(a))}, {Len: uint64(len(b))}}
	if len(a) > 0 {
		liov[0].Base = &a[0]
	}
	if len(b) > 0 {
		liov[1].Base = &b[0]
	}
	riov := unix.RemoteIovec{Base: uintptr(addr), Len: n}
	nr := uintptr(unix.SYS_PROCESS_VM_READV)
	if write {
		nr = unix.SYS_PROCESS_VM_WRITEV
	}
	r, _, errno := unix.Syscall6(nr, uintptr(t.Tid),
		uintptr(unsafe.Pointer(&liov[0])), 2, uintptr(unsafe.Pointer(&riov)), 1, 0)
	if errno != 0 {
		return 0, unix.EFAULT
	}
	if int(r) != n {
		return int(r), unix.EFAULT
	}
	return n, nil
}

func validRange(addr uint64, n int) bool {
	return n <= MaxCopy && addr+uint64(n) >= addr && int64(addr+uint64(n)) >= 0
}

// alive reports whether the thread's exit has not been applied: its tid
// still names it.
func (t *Task) alive() bool { return !t.dead.Load() }

func (t *Task) vmIO(addr uint64, b []byte, write bool) error {
	if len(b) == 0 {
		return nil
	}
	if !validRange(addr, len(b)) || !t.alive() {
		return unix.EFAULT
	}
	liov := unix.Iovec{Base: &b[0], Len: uint64(len(b))}
	riov := unix.RemoteIovec{Base: uintptr(addr), Len: len(b)}
	nr := uintptr(unix.SYS_PROCESS_VM_READV)
	if write {
		nr = unix.SYS_PROCESS_VM_WRITEV
	}
	// A partial copy (the range runs into a bad page) is EFAULT, as
	// copy_{from,to}_user's short count is.
	r, _, errno := unix.Syscall6(nr, uintptr(t.Tid), uintptr(unsafe.Pointer(&liov)), 1,
		uintptr(unsafe.Pointer(&riov)), 1, 0)
	if errno != 0 || int(r) != len(b) {
		return unix.EFAULT
	}
	return nil
}
