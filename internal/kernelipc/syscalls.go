package kernelipc

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw SysV IPC syscalls on the calling thread. Each returns the kernel's
// return value and errno (0 on success).

// Sembuf is struct sembuf.
type Sembuf struct {
	Num uint16
	Op  int16
	Flg int16
}

func errnoOf(e unix.Errno) unix.Errno { return e }

// Semget is semget(2).
func Semget(key int32, nsems int, flg int) (int, unix.Errno) {
	r, _, e := unix.Syscall(unix.SYS_SEMGET, uintptr(key), uintptr(nsems), uintptr(flg))
	return int(r), errnoOf(e)
}

// Semtimedop is semtimedop(2); a nil timeout waits without limit.
func Semtimedop(id int, sops []Sembuf, timeout *unix.Timespec) (int, unix.Errno) {
	var p unsafe.Pointer
	if len(sops) > 0 {
		p = unsafe.Pointer(&sops[0])
	}
	r, _, e := unix.Syscall6(unix.SYS_SEMTIMEDOP, uintptr(id), uintptr(p), uintptr(len(sops)), uintptr(unsafe.Pointer(timeout)), 0, 0)
	return int(r), errnoOf(e)
}

// SemtimedopN is semtimedop with an explicit nsops, for the argument
// checks (nsops 0 or above SEMOPM).
func SemtimedopN(id int, sops []Sembuf, nsops uint) (int, unix.Errno) {
	var p unsafe.Pointer
	if len(sops) > 0 {
		p = unsafe.Pointer(&sops[0])
	}
	r, _, e := unix.Syscall6(unix.SYS_SEMTIMEDOP, uintptr(id), uintptr(p), uintptr(nsops), 0, 0, 0)
	return int(r), errnoOf(e)
}

// Semctl is semctl(2) with its fourth argument as a raw word.
func Semctl(id, num, cmd int, arg uintptr) (int, unix.Errno) {
	r, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), uintptr(num), uintptr(cmd), arg, 0, 0)
	return int(r), errnoOf(e)
}

// SemctlBuf is semctl(2) with a pointer to buf as its fourth argument.
func SemctlBuf(id, num, cmd int, buf []byte) (int, unix.Errno) {
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	return Semctl(id, num, cmd, uintptr(p))
}

// Msgget is msgget(2).
func Msgget(key int32, flg int) (int, unix.Errno) {
	r, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(key), uintptr(flg), 0)
	return int(r), errnoOf(e)
}

// Msgsnd is msgsnd(2); msg holds the long mtype followed by the text, and
// size is the msgsz argument.
func Msgsnd(id int, msg []byte, size int, flg int) (int, unix.Errno) {
	var p unsafe.Pointer
	if len(msg) > 0 {
		p = unsafe.Pointer(&msg[0])
	}
	r, _, e := unix.Syscall6(unix.SYS_MSGSND, uintptr(id), uintptr(p), uintptr(size), uintptr(flg), 0, 0)
	return int(r), errnoOf(e)
}

// Msgrcv is msgrcv(2) into buf (mtype then text); size is msgsz.
func Msgrcv(id int, buf []byte, size int, typ int64, flg int) (int, unix.Errno) {
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	r, _, e := unix.Syscall6(unix.SYS_MSGRCV, uintptr(id), uintptr(p), uintptr(size), uintptr(typ), uintptr(flg), 0)
	return int(r), errnoOf(e)
}

// Msgctl is msgctl(2) with a pointer to buf as its third argument.
func Msgctl(id, cmd int, buf []byte) (int, unix.Errno) {
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	r, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), uintptr(cmd), uintptr(p))
	return int(r), errnoOf(e)
}
