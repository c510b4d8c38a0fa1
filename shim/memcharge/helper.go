package memcharge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// HelperArg is the argument that makes the shim's binary run HelperMain.
const HelperArg = "memcharge-helper"

// helperEnv is set in a helper's environment, so that a binary started as
// a helper that does not run HelperMain never starts helpers itself.
const helperEnv = "CONTAINERD_SHIM_IPC_MEMCHARGE_HELPER"

// helper is a process in a pod's memory cgroup that allocates a ballast's
// pages on the shim's request.
type helper struct {
	container string
	cmd       *exec.Cmd
	conn      *os.File      // the shim's end of a SOCK_SEQPACKET pair
	timeout   time.Duration // a round trip's limit: helperTimeout at its start
	stderr    *tail         // the end of its standard error (otherDeath)
}

// tail keeps the last tailMax bytes written to it.
type tail struct {
	mu sync.Mutex // protects b: os/exec's copying goroutine writes it
	b  []byte
}

const tailMax = 1024

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = t.b[len(t.b)-tailMax:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// The files a helper allocates pages of: its fds 3 and 5.
const (
	fileBallast = 0
	fileText    = 1
)

// startHelper starts a helper with memfd and textfd (-1: none), puts it
// in the first cgroup host names that takes it (settle), and protects it
// from the pod's OOM killer. The helper allocates nothing before it is
// told to, so every page it allocates is the pod's.
func startHelper(memfd, textfd int, host Host) (*helper, error) {
	if os.Getenv(helperEnv) != "" {
		// This process was started as a helper but is not one (a binary
		// without HelperMain, e.g. a test binary): starting helpers
		// from it would recurse.
		return nil, errors.New("not starting a helper from a helper")
	}
	places, err := host()
	if err != nil {
		return nil, err
	}
	if len(places) == 0 {
		return nil, errors.New("no cgroup to put a helper in")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	// The shim's end is non-blocking, so that a round trip has a
	// deadline (a helper in a frozen cgroup never answers).
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "memcharge"), os.NewFile(uintptr(fds[1]), "memcharge-helper")
	defer theirs.Close()
	mf, err := dupFile(memfd, "ballast")
	if err != nil {
		mine.Close()
		return nil, err
	}
	defer mf.Close()
	cmd := exec.Command(exe(), HelperArg)
	cmd.ExtraFiles = []*os.File{mf, theirs} // fds 3 and 4
	if textfd >= 0 {
		tf, err := dupFile(textfd, "text file")
		if err != nil {
			mine.Close()
			return nil, err
		}
		defer tf.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, tf) // fd 5
	}
	cmd.Env = []string{"GOMAXPROCS=1", "GOGC=off", helperEnv + "=1"}
	stderr := &tail{}
	cmd.Stderr = stderr
	if fillByPages() {
		cmd.Env = append(cmd.Env, fillEnv+"=1")
	}
	// No Pdeathsig: it is tied to the forking thread, which Go may end
	// (a locked goroutine's); the helper ends when the shim's end of its
	// socket closes, as it does when the shim dies.
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("start %s %s: %w", cmd.Path, HelperArg, err)
	}
	h := &helper{cmd: cmd, conn: mine, timeout: helperTimeout, stderr: stderr}
	pid := strconv.Itoa(cmd.Process.Pid)
	// Without CAP_SYS_RESOURCE the helper keeps the shim's score (which
	// containerd sets for its shims); its few pages of its own make it
	// the pod OOM killer's last choice anyway (the ballast is not mapped,
	// so not counted against it; a fill by pages maps one fillPiece at a
	// time).
	_ = os.WriteFile("/proc/"+pid+"/oom_score_adj", []byte("-1000"), 0)
	if h.container, err = settle(cmd.Process.Pid, places); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

// settle moves process pid into the first of places that takes it and
// returns that place's container. A place is passed over when:
//
//   - its cgroup is frozen (cgroup v2: cgroup.freeze, its own or an
//     ancestor's, as runc pause and systemctl freeze set it). A task
//     that enters a freezing cgroup is frozen itself
//     (kernel/cgroup/freezer.c: cgroup_freezer_migrate_task), and a
//     frozen helper answers nothing: every growth would wait
//     helperTimeout for it, twice. On v1 the helper joins only the
//     memory hierarchy, a freezer cgroup only where the freezer is
//     mounted with memory (unusual; its freezer.state is not read).
//   - writing its cgroup.procs fails, on v2 with EBUSY for a cgroup
//     that has controllers enabled for its children (the
//     no-internal-process rule) or EOPNOTSUPP for one whose type is
//     "domain invalid" (kernel/cgroup/cgroup.c: cgroup_migrate_vet_dst),
//     and the cgroup the place's Pid is in now, if below it, does not
//     take it either. That one holds a process, so the rule does not
//     refuse it.
func settle(pid int, places []Place) (string, error) {
	var errs []error
	// moveInto reports whether pid went into procs, and whether procs's
	// cgroup was frozen.
	moveInto := func(procs string) (ok, frozen bool) {
		if d := frozenAt(filepath.Dir(procs)); d != "" {
			errs = append(errs, fmt.Errorf("%s: frozen (%s)", procs, filepath.Join(d, "cgroup.freeze")))
			return false, true
		}
		if err := writePid(procs, pid); err != nil {
			errs = append(errs, err)
			return false, false
		}
		return true, false
	}
	for _, p := range places {
		ok, frozen := moveInto(p.Procs)
		if ok {
			return p.Container, nil
		}
		if frozen || p.Pid <= 0 {
			continue
		}
		leaf, err := leafBelow(p.Pid, p.Procs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok, _ := moveInto(leaf); ok {
			return p.Container, nil
		}
	}
	return "", errors.Join(errs...)
}

// writePid writes pid to the cgroup.procs file procs.
func writePid(procs string, pid int) error {
	if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move the helper into %s: %w", procs, err)
	}
	return nil
}

// memoryCgroupOf is MemoryCgroup; a test replaces it.
var memoryCgroupOf = MemoryCgroup

// leafBelow returns the cgroup.procs file of the memory cgroup process
// pid is in now, if that cgroup is strictly below procs's: a cgroup a
// container made inside its own. A pid reused by a process of another
// container is not below, and is refused.
func leafBelow(pid int, procs string) (string, error) {
	now, err := memoryCgroupOf(pid)
	if err != nil {
		return "", fmt.Errorf("memory cgroup of pid %d: %w", pid, err)
	}
	if !strings.HasPrefix(filepath.Dir(now), filepath.Dir(procs)+"/") {
		return "", fmt.Errorf("pid %d is in %s, not below %s", pid, filepath.Dir(now), filepath.Dir(procs))
	}
	return now, nil
}

// Frozen reports whether the cgroup whose cgroup.procs file is procs is
// frozen or being frozen: on cgroup v2, its cgroup.freeze or an
// ancestor's is 1 (frozenAt); never on v1.
func Frozen(procs string) bool { return frozenAt(filepath.Dir(procs)) != "" }

// frozenAt returns the cgroup, dir or an ancestor, whose cgroup.freeze
// is 1, or "". cgroup.freeze is a v2 file and absent from the root
// cgroup (CFTYPE_NOT_ON_ROOT): the walk ends at the first directory
// without one, at once in a v1 memory hierarchy. Freezing propagates to
// descendants (kernel/cgroup/freezer.c: cgroup_freeze raises e_freeze
// in each), but a descendant's own cgroup.freeze still reads 0: the
// ancestors must be read too.
func frozenAt(dir string) string {
	for d := dir; ; {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.freeze"))
		if err != nil {
			return ""
		}
		if strings.TrimSpace(string(b)) == "1" {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
}

// dupFile returns a copy of fd for a child's ExtraFiles, closed with the
// *os.File without closing fd.
func dupFile(fd int, name string) (*os.File, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup the %s: %w", name, err)
	}
	return os.NewFile(uintptr(dup), name), nil
}

// helperTimeout bounds a round trip: reclaim and an OOM kill in the pod
// take milliseconds; a helper that takes longer is stuck (its cgroup
// frozen) and is replaced once (errHelperStuck), then charges go unbacked
// for retryAfter.
var helperTimeout = 5 * time.Second

// errDiedAllocating: the helper ended between a request and its answer.
var errDiedAllocating = errors.New("memcharge helper ended while allocating")

// errHelperStuck: the helper did not answer within helperTimeout. It is
// not a death: a helper that is frozen, or slow to start on a loaded
// machine, says nothing about the pod's memory.
var errHelperStuck = errors.New("memcharge helper did not answer")

// allocate has the helper allocate length bytes of file (fileBallast or
// fileText) from off. It returns the helper's errno (unix.ENOMEM: the
// pod's cgroup is full), errDiedAllocating if the helper is gone,
// errHelperStuck if it did not answer in time, or another error.
func (h *helper) allocate(file int, off, length int64) error {
	var req [24]byte
	binary.LittleEndian.PutUint64(req[0:], uint64(off))
	binary.LittleEndian.PutUint64(req[8:], uint64(length))
	binary.LittleEndian.PutUint64(req[16:], uint64(file))
	if err := h.conn.SetDeadline(time.Now().Add(h.timeout)); err != nil {
		return fmt.Errorf("memcharge helper: %w", err)
	}
	if _, err := h.conn.Write(req[:]); err != nil {
		return fmt.Errorf("memcharge helper: %w", err)
	}
	var resp [4]byte
	if n, err := h.conn.Read(resp[:]); err != nil || n != 4 {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w within %v", errHelperStuck, h.timeout)
		}
		// It died allocating: with no -1000 score (no CAP_SYS_RESOURCE)
		// the pod's OOM killer can take it when nothing bigger is left.
		return fmt.Errorf("%w (%d bytes, %v)", errDiedAllocating, n, err)
	}
	if e := syscall.Errno(binary.LittleEndian.Uint32(resp[:])); e != 0 {
		return e
	}
	return nil
}

// stop kills the helper and reaps it.
func (h *helper) stop() {
	h.conn.Close()
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// otherDeath reports whether the helper, stopped after it ended by itself
// (errDiedAllocating: its end of the socket closed as it exited), is known
// to have ended for something other than want of memory in its cgroup:
//   - a signal other than SIGKILL, the OOM killer's (mm/oom_kill.c:
//     __oom_kill_process), such as SIGTERM from systemd stopping a scope;
//   - an exit status other than 2, the Go runtime's fatal error (the
//     helper's own errors);
//   - status 2 for a thread the kernel refused with EAGAIN: the pod's
//     pids.max on cgroup v2, where the helper's threads are the pod's
//     tasks (kernel/cgroup/pids.c: pids_can_fork; it makes three after
//     it is moved in). runtime.newosproc prints "errno=" and the number
//     before it exits. With ENOMEM instead, the cgroup could not hold the
//     thread's stack and had nothing left to kill: memory.
//
// An end not known is taken for memory, as any death was before the
// statuses were read: inside containerd's shim, its reaper (which waits
// for every child) usually collects the helper's status first, and
// exec.Cmd.Wait then has none (ProcessState nil).
func (h *helper) otherDeath() bool {
	if h.cmd.ProcessState == nil {
		return false
	}
	ws, ok := h.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return false
	case ws.Signaled():
		return ws.Signal() != syscall.SIGKILL
	case ws.Exited() && ws.ExitStatus() == 2:
		return strings.Contains(h.stderr.String(), "errno="+strconv.Itoa(int(syscall.EAGAIN))+")")
	}
	return true
}

// end describes how the reaped helper ended, for the log: its wait
// status and the last line of its standard error.
func (h *helper) end() string {
	st := "status collected elsewhere (the shim's reaper)"
	if h.cmd.ProcessState != nil {
		st = h.cmd.ProcessState.String()
	}
	if lines := strings.Split(strings.TrimSpace(h.stderr.String()), "\n"); lines[len(lines)-1] != "" {
		st += ", stderr: " + lines[len(lines)-1]
	}
	return st
}

// HelperMain is the helper's body, run by the shim's binary when its first
// argument is HelperArg: fd 3 is the ballast, fd 4 the shim's socket, fd 5
// (if open) the message text file. Each request (offset, length, file 0
// for fd 3 or 1 for fd 5: three little-endian uint64) is answered with the
// errno of the allocation (0 on success): fallocate's, or that of a fill
// by pages where the host's THP settings call for it (fill.go). It returns when the shim closes the
// socket.
func HelperMain() int {
	runtime.GOMAXPROCS(1)
	byPages := os.Getenv(fillEnv) == "1"
	var req [24]byte
	for {
		n, err := unix.Read(4, req[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != len(req) {
			return 0
		}
		off := int64(binary.LittleEndian.Uint64(req[0:]))
		length := int64(binary.LittleEndian.Uint64(req[8:]))
		fd := 3
		if binary.LittleEndian.Uint64(req[16:]) == fileText {
			fd = 5
		}
		var errno uint32
		err = allocate(fd, off, length, byPages)
		if e, ok := err.(syscall.Errno); ok {
			errno = uint32(e)
		} else if err != nil {
			errno = uint32(unix.EIO)
		}
		var resp [4]byte
		binary.LittleEndian.PutUint32(resp[:], errno)
		if _, err := unix.Write(4, resp[:]); err != nil {
			return 0
		}
	}
}
