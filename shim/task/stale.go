package task

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/log"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
)

// A shim that is killed (SIGKILL, the OOM killer) leaves its unix sockets
// behind: the listenerPath socket, the control socket that ipcctl and the
// metrics scraper dial, and the IPC namespace registry links that point at
// the listener socket. containerd then runs the shim binary's delete
// action in the dead shim's first bundle (Manager.Stop), which removes
// them; a starting shim also sweeps what an earlier crash left when that
// action did not run (containerd itself was down, say).

// staleAge is how long a socket file must have existed, unlistened, before
// a sweep removes it: a shim binds its socket a moment before it listens.
const staleAge = time.Minute

// Stop is the shim binary's delete action: runc's clean-up, then the
// removal of the dead shim's sockets. containerd runs it in the bundle the
// shim was started in, so SocketPath names the dead shim's socket; each
// file goes only if no process listens on it.
func (m Manager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	st, err := m.Shim.Stop(ctx, id)
	n := removeIfStale(SocketPath(), 0)
	if n > 0 {
		log.G(ctx).WithField("id", id).Infof("removed %d socket(s) left by a dead shim", n)
	}
	return st, err
}

// sweepStale removes the sockets of dead shims under the listener socket
// directory that are older than staleAge, and returns how many files went.
func sweepStale(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sock") {
			n += removeIfStale(filepath.Join(dir, e.Name()), staleAge)
		}
	}
	return n
}

// removeIfStale removes listener socket sock, its control socket and the
// registry links to it, each if it is at least minAge old and no process
// listens on it, and returns how many files it removed.
func removeIfStale(sock string, minAge time.Duration) int {
	n := 0
	for _, p := range []string{sock, control.SocketPath(sock)} {
		fi, err := os.Lstat(p)
		if err != nil || time.Since(fi.ModTime()) < minAge || listening(p) {
			continue
		}
		if os.Remove(p) == nil {
			n++
		}
	}
	if listening(sock) {
		return n
	}
	links, _ := os.ReadDir(filepath.Join(filepath.Dir(sock), "ns"))
	for _, l := range links {
		p := filepath.Join(filepath.Dir(sock), "ns", l.Name())
		if t, err := os.Readlink(p); err == nil && t == sock && os.Remove(p) == nil {
			n++
		}
	}
	return n
}
