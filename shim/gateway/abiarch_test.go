package gateway

import (
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/abi"
)

// TestABIArch checks that a caller's structures are laid out for the
// architecture of its calling convention: struct semid64_ds is 104 bytes
// for an x86_64 caller and 88 for an arm64 one.
func TestABIArch(t *testing.T) {
	for _, c := range []struct {
		arch uint32
		want abi.Arch
		size int
	}{
		{archX86_64, abi.AMD64, 104},
		{archAArch64, abi.ARM64, 88},
	} {
		var r Request
		r.Notif.Data.Arch = c.arch
		if got := r.abiArch(); got != c.want {
			t.Errorf("arch %#x: %v, want %v", c.arch, got, c.want)
		}
		if got := abi.SizeOfSemidDS(r.abiArch()); got != c.size {
			t.Errorf("arch %#x: semid64_ds is %d bytes, want %d", c.arch, got, c.size)
		}
	}
	if maxSemidDSSize != abi.SizeOfSemidDSAMD64 {
		t.Errorf("maxSemidDSSize %d", maxSemidDSSize)
	}
}
