// Package seccompnotify is the supervisor side of seccomp user notification
// (SECCOMP_RET_USER_NOTIF): the kernel ABI structs, the listener fd's
// ioctls (RECV, SEND, ID_VALID, SET_FLAGS) and a receive loop that ends
// when the filter has no users left.
//
// The package installs no filter: in production runc does that and hands
// the listener fd over its listenerPath socket (see package listener).
package seccompnotify

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Data is the kernel's struct seccomp_data: the trapped system call as the
// filter saw it.
type Data struct {
	// Nr is the system call number in the numbering of Arch.
	Nr int32
	// Arch is the AUDIT_ARCH_* value of the calling convention used; a
	// 64-bit process can still enter through a 32-bit entry point
	// (int $0x80 on x86_64), so decode by Arch, never by the shim's own
	// architecture.
	Arch uint32
	// InstructionPointer is the caller's instruction pointer at the call.
	InstructionPointer uint64
	// Args are the six raw argument registers.
	Args [6]uint64
}

// Notif is the kernel's struct seccomp_notif, filled in by Recv.
type Notif struct {
	// ID is the notification's cookie, unique per filter; it names the
	// notification to Send and IDValid.
	ID uint64
	// Pid is the calling *thread's* id in the pid namespace of whoever
	// called Recv (0 if the thread is not visible there).
	Pid   uint32
	Flags uint32
	Data  Data
}

// Resp is the kernel's struct seccomp_notif_resp, the answer to one
// notification.
type Resp struct {
	ID uint64
	// Val is the system call's return value when Error is 0.
	Val int64
	// Error is a negated errno (for example -int32(unix.EINTR)), or 0.
	Error int32
	// Flags may hold FlagContinue (let the kernel run the call).
	Flags uint32
}

// FlagContinue asks the kernel to execute the call itself instead of
// returning Val or Error (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
const FlagContinue = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE

// Sizes of the structs as compiled into this package; CheckSizes compares
// them with the running kernel's.
const (
	NotifSize = int(unsafe.Sizeof(Notif{}))
	RespSize  = int(unsafe.Sizeof(Resp{}))
	DataSize  = int(unsafe.Sizeof(Data{}))
)

// The sizes the ioctl numbers encode (_IOWR('!', 0, struct seccomp_notif)
// and _IOWR('!', 1, struct seccomp_notif_resp)).
var (
	_ [80 - NotifSize]struct{}
	_ [NotifSize - 80]struct{}
	_ [24 - RespSize]struct{}
	_ [RespSize - 24]struct{}
	_ [64 - DataSize]struct{}
	_ [DataSize - 64]struct{}
)

// sizes is struct seccomp_notif_sizes.
type sizes struct {
	Notif, Resp, Data uint16
}

// CheckSizes asks the kernel for its notification struct sizes
// (seccomp(SECCOMP_GET_NOTIF_SIZES)) and returns an error if they differ
// from this package's: a kernel with larger structs would need larger
// buffers, and the ioctl numbers would not match.
func CheckSizes() error {
	var s sizes
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_NOTIF_SIZES, 0, uintptr(unsafe.Pointer(&s)))
	if errno != 0 {
		return fmt.Errorf("seccomp(SECCOMP_GET_NOTIF_SIZES): %w", errno)
	}
	if int(s.Notif) != NotifSize || int(s.Resp) != RespSize || int(s.Data) != DataSize {
		return fmt.Errorf("seccomp notification sizes: kernel has notif=%d resp=%d data=%d, want %d/%d/%d",
			s.Notif, s.Resp, s.Data, NotifSize, RespSize, DataSize)
	}
	return nil
}

// AddFD is the kernel's struct seccomp_notif_addfd.
type AddFD struct {
	ID         uint64
	Flags      uint32
	Srcfd      uint32
	Newfd      uint32
	NewfdFlags uint32
}

var (
	_ [24 - unsafe.Sizeof(AddFD{})]struct{}
	_ [unsafe.Sizeof(AddFD{}) - 24]struct{}
)
