package task

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	ptypes "github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/log"
)

// Containers of different shim processes in one IPC namespace
// (`--ipc=container:X`, `ctr run --with-ns ipc:...` without a common shim
// group) must share one engine namespace. The shim that made it (its
// owner) publishes its listener socket under RegistryDir/<ipc inode>; a
// shim creating a container that joins that namespace points the
// container's listenerPath at the owner's socket instead of its own, so
// runc hands the container's seccomp listeners to the owner, which serves
// them from the namespace's engines. The owner counts such foreign
// containers by their live listeners (it never sees their Delete) and
// stays up while it serves any, even after its own containers are gone.

// registryDir returns the directory of the IPC namespace registry.
func (s *Service) registryDir() string { return filepath.Join(filepath.Dir(s.sock), "ns") }

func (s *Service) registryLink(ino uint64) string {
	return filepath.Join(s.registryDir(), strconv.FormatUint(ino, 10))
}

// publish records this shim as the owner of IPC namespace ino.
func (s *Service) publish(ino uint64) {
	if err := os.MkdirAll(s.registryDir(), 0o700); err != nil {
		log.G(s.ctx).WithError(err).Warn("IPC namespace registry")
		return
	}
	link := s.registryLink(ino)
	os.Remove(link)
	if err := os.Symlink(s.sock, link); err != nil {
		log.G(s.ctx).WithError(err).Warn("IPC namespace registry")
	}
}

// unpublish removes the record of ino if it is this shim's.
func (s *Service) unpublish(ino uint64) {
	link := s.registryLink(ino)
	if t, err := os.Readlink(link); err == nil && t == s.sock {
		os.Remove(link)
	}
}

// owner returns the listener socket of the shim serving IPC namespace
// ino, or "".
func (s *Service) owner(ino uint64) string {
	t, err := os.Readlink(s.registryLink(ino))
	if err != nil || t == s.sock {
		return ""
	}
	if !listening(t) {
		// A stale record: that shim died without freeing the namespace,
		// and the kernel reuses namespace inodes.
		return ""
	}
	return t
}

// listening reports whether a unix socket is bound to path in this
// network namespace (/proc/net/unix), without connecting to it: a socket
// file left by a dead process is not.
func listening(path string) bool {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		// Num RefCount Protocol Flags Type St Inode Path
		f := strings.Fields(l)
		if len(f) == 8 && f[7] == path && f[3] == "00010000" { // __SO_ACCEPTCON: listening
			return true
		}
	}
	return false
}

// deferredShutdown is a Shutdown that containerd asked for while foreign
// containers were served, run when the last of them leaves.
var deferredShutdown sync.Map // *Service -> *taskAPI.ShutdownRequest

// Shutdown shuts the shim down when it serves no container, its own or
// another shim's.
func (s *Service) Shutdown(ctx context.Context, r *taskAPI.ShutdownRequest) (*ptypes.Empty, error) {
	if n := s.ns.Foreigners(); n > 0 {
		log.G(ctx).Infof("shutdown deferred: serving the IPC calls of %d container(s) of other shims that joined this shim's IPC namespaces", n)
		deferredShutdown.Store(s, r)
		return &ptypes.Empty{}, nil
	}
	return s.TTRPCTaskService.Shutdown(ctx, r)
}

// foreignLeft runs a deferred shutdown once no foreign container is left.
func (s *Service) foreignLeft() {
	if s.ns.Foreigners() > 0 {
		return
	}
	if r, ok := deferredShutdown.LoadAndDelete(s); ok {
		log.G(s.ctx).Info("last foreign container left: running the deferred shutdown")
		if _, err := s.TTRPCTaskService.Shutdown(s.ctx, r.(*taskAPI.ShutdownRequest)); err != nil {
			log.G(s.ctx).WithError(err).Warn("deferred shutdown")
		}
	}
}
