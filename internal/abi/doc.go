// Package abi holds the Linux kernel's System V IPC structures as they
// cross the system call boundary, the way gVisor's pkg/abi/linux does:
// one Go type per C struct, each with a SizeOf constant and MarshalBytes /
// UnmarshalBytes that write and read the C layout. It is the one place
// that knows byte offsets; the shim's gateway and the tests use the types.
//
// Architectures: the layouts are those of the two 64-bit ABIs the shim
// serves, x86_64 and arm64 (LP64, little-endian). They agree on every
// structure here except struct semid64_ds, where x86_64 keeps two unused
// longs after the times (arch/x86/include/uapi/asm/sembuf.h) that the
// generic layout used by arm64 does not have
// (include/uapi/asm-generic/sembuf.h); its methods take an Arch.
// x32, i386 and arm (32-bit) layouts are not described.
//
// Marshalling writes every byte of the structure, padding and unused
// fields as zero; unmarshalling reads the named fields and ignores the
// rest. Both panic if the buffer is shorter than the structure.
//
// The layouts are checked against the C headers by TestLayout, which
// compiles a C program with gcc and compares sizeof and offsetof of every
// field with what MarshalBytes writes.
package abi

import "encoding/binary"

// le is the byte order of both architectures.
var le = binary.LittleEndian

// Arch is a 64-bit Linux ABI whose layouts the package describes.
type Arch int

// The architectures.
const (
	// AMD64 is x86_64 (AUDIT_ARCH_X86_64 without the x32 bit).
	AMD64 Arch = iota
	// ARM64 is aarch64 (AUDIT_ARCH_AARCH64), which takes the asm-generic
	// layouts.
	ARM64
)

// String returns the architecture's name.
func (a Arch) String() string {
	switch a {
	case AMD64:
		return "amd64"
	case ARM64:
		return "arm64"
	}
	return "unknown"
}
