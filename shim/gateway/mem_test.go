package gateway_test

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"golang.org/x/sys/unix"
)

// selfTask resolves the calling thread, locked to its OS thread.
func selfTask(tb testing.TB) *gateway.Task {
	tb.Helper()
	runtime.LockOSThread()
	tb.Cleanup(runtime.UnlockOSThread)
	return gateway.NewTestTask(unix.Gettid())
}

// TestMemProtections checks that the gateway's copies honour page
// protections as copy_{from,to}_user do (the kernel is the oracle: a
// native read(2) into, or write(2) from, the same pages).
func TestMemProtections(t *testing.T) {
	tk := selfTask(t)
	page := unix.Getpagesize()
	m, err := unix.Mmap(-1, 0, 3*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	for i := range m[:page] {
		m[i] = byte(i)
	}
	if err := unix.Mprotect(m[page:2*page], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mprotect(m[2*page:], unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(unsafe.Pointer(&m[0])))
	none, ro := base+uint64(page), base+2*uint64(page)
	// The oracle: the kernel's own copies into and out of these pages.
	fds := make([]int, 2)
	if err := unix.Pipe(fds); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	kernelRead := func(addr uint64, n int) error { // copy_from_user
		_, _, e := unix.Syscall(unix.SYS_WRITE, uintptr(fds[1]), uintptr(addr), uintptr(n))
		if e != 0 {
			return e
		}
		var sink [64]byte
		unix.Read(fds[0], sink[:n])
		return nil
	}
	kernelWrite := func(addr uint64, n int) error { // copy_to_user
		unix.Write(fds[1], make([]byte, n))
		_, _, e := unix.Syscall(unix.SYS_READ, uintptr(fds[0]), uintptr(addr), uintptr(n))
		if e != 0 {
			var sink [64]byte
			unix.Read(fds[0], sink[:n])
			return e
		}
		return nil
	}
	buf := make([]byte, 16)
	for _, c := range []struct {
		name  string
		addr  uint64
		write bool
	}{
		{"read valid", base, false},
		{"read PROT_NONE", none, false},
		{"read straddling into PROT_NONE", none - 8, false},
		{"read read-only", ro, false},
		{"write valid", base + 64, true},
		{"write PROT_NONE", none, true},
		{"write read-only", ro, true},
		{"read NULL", 0, false},
		{"read kernel address", 0xffff800000001000, false},
	} {
		var native, got error
		if c.write {
			native, got = kernelWrite(c.addr, len(buf)), tk.WriteMem(c.addr, buf)
		} else {
			native, got = kernelRead(c.addr, len(buf)), tk.ReadMem(c.addr, buf)
		}
		if !errors.Is(got, native) && !(got == nil && native == nil) {
			t.Errorf("%s: gateway %v, kernel %v", c.name, got, native)
		}
	}
}

// BenchmarkMem24 measures a 24-byte copy from the caller through
// process_vm_readv, the gateway's way.
func BenchmarkMem24(b *testing.B) {
	tk := selfTask(b)
	src := make([]byte, 24)
	dst := make([]byte, 24)
	addr := uint64(uintptr(unsafe.Pointer(&src[0])))
	b.ReportAllocs()
	for b.Loop() {
		if err := tk.ReadMem(addr, dst); err != nil {
			b.Fatal(err)
		}
	}
}
