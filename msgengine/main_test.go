package msgengine

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/kernelipc"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

var kernelOK bool

func TestMain(m *testing.M) {
	kernelipc.ServeActorIfChild()
	kernelOK = kernelipc.Available()
	os.Exit(m.Run())
}

func needKernel(t testing.TB) {
	t.Helper()
	if !kernelOK {
		t.Skip("cannot create IPC namespaces (need CAP_SYS_ADMIN): no kernel oracle")
	}
}

// processCaps returns this process's effective capabilities, so that the
// engine's root callers have exactly what the kernel sees (this sandbox's
// root lacks CAP_SYS_RESOURCE, for one).
func processCaps() ipcns.CapSet {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ipcns.AllCaps
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err == nil {
				return ipcns.CapSet(n)
			}
		}
	}
	return ipcns.AllCaps
}

// processGroups returns the supplementary groups every actor inherits.
func processGroups() []uint32 {
	gs, _ := unix.Getgroups()
	out := make([]uint32, len(gs))
	for i, g := range gs {
		out[i] = uint32(g)
	}
	return out
}
