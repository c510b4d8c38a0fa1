package main

import (
	"encoding/binary"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// msgsnd's buffer is the caller's until the call returns: a trapped call
// is read by the shim while the caller waits, and a garbage collection in
// that time must not free it (sys6 is a function variable, so the
// compiler does not keep a pointer converted to uintptr in its arguments
// alive, as it does for a direct call of unix.Syscall6). Here the "call"
// collects garbage, returns free memory to the kernel and then reads
// mtype and the text as the shim does, with process_vm_readv.
func TestMsgsndBufferLivesThroughCall(t *testing.T) {
	old := sys6
	defer func() { sys6 = old }()
	// A large object has a span of its own: once unreachable it is freed
	// and its pages given back (read as zeros) by FreeOSMemory.
	const size = 64 << 10
	got := make([]byte, 8+size)
	var readErr error
	sys6 = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, unix.Errno) {
		debug.FreeOSMemory()
		_, readErr = unix.ProcessVMReadv(os.Getpid(),
			[]unix.Iovec{{Base: &got[0], Len: uint64(len(got))}},
			[]unix.RemoteIovec{{Base: a2, Len: int(8 + a3)}}, 0)
		return 0, 0, 0
	}
	if err := msgsnd1(1, 42, strings.Repeat("x", size), 0); err != nil {
		t.Fatal(err)
	}
	if readErr != nil {
		t.Fatalf("read the buffer during the call: %v", readErr)
	}
	if mtype := int64(binary.LittleEndian.Uint64(got)); mtype != 42 {
		t.Fatalf("mtype read during the call is %d, want 42 (the buffer was freed)", mtype)
	}
	if text := string(got[8:]); text != strings.Repeat("x", size) {
		t.Fatalf("text read during the call is not the message's (first bytes %q)", text[:16])
	}
}
