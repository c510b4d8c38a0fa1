package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// ErrTaskGone means the calling thread has exited (or its tid no longer
// names it): there is nobody to answer.
var ErrTaskGone = errors.New("gateway: task gone")

// Task is a calling thread as the gateway knows it: its thread group's pid
// handle, its credentials and its kernel IPC namespace.
//
// A Task is bound to one kernel task by a pidfd (PIDFD_THREAD): while the
// pidfd's task lives, its tid names nobody else, so reads of
// /proc/<tid>/... done while it is alive describe that task. The
// notification's task is the Task's task exactly when the Task is alive
// and the notification's ID_VALID succeeds afterwards.
type Task struct {
	// Tid and Tgid are the thread and thread group ids in the shim's pid
	// namespace.
	Tid, Tgid int
	// Caller is what the engines need: credentials mapped through the
	// task's user namespace, and the process's pid handle.
	Caller ipcns.Caller
	// IPCNS is the inode of the task's kernel IPC namespace
	// (/proc/<tid>/ns/ipc): it picks the engine namespace.
	IPCNS uint64
	// Thread is the thread's own pid handle when it does not lead its
	// thread group (nil for the leader): msgrcv records it as msg_lrpid
	// when a message is handed to it asleep, as Linux's task_pid.
	Thread *ipcns.Pid

	proc *process
	// key is the pidfd's credential snapshot: a change means a setuid
	// family call or an exec, and the Task is rebuilt.
	key credKey

	// mu guards the fds, so that release never closes one that an ioctl
	// or a read is using (the number could be reused by another open).
	mu    sync.Mutex
	pidfd int // PIDFD_THREAD pidfd; -1 once released
	memfd int // /proc/<tid>/mem, -1 until first use and once released

	// callMu guards blocked and intr, the thread's signal bookkeeping.
	callMu  sync.Mutex
	blocked *Request      // the thread's blocked call, if any
	intr    *interruption // its last interrupted blocked call, until its next call
	last    *Request      // its previous call, for Stats.Repeats
}

// dupFD0 returns a duplicate of the task's fd 0 (pidfd_getfd), or an
// error if it has none.
func (t *Task) dupFD0() (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pidfd < 0 {
		return -1, unix.EBADF
	}
	return unix.PidfdGetfd(t.pidfd, 0, 0)
}

// isStopped reports whether the thread is stopped (job control, ptrace,
// or frozen), from /proc/<tid>/stat. Used only on the slow path, when a
// blocked call's notification has gone.
func (t *Task) isStopped() bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(t.Tid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	switch b[i+2] {
	case 'T', 't':
		return true
	}
	return false
}

type credKey struct{ ruid, euid, suid, fsuid, rgid, egid, sgid, fsgid uint32 }

// process is a thread group that made calls: its pid handle (shared by
// its threads, the key of its SEM_UNDO list) and its exit watch.
type process struct {
	tgid int
	pid  *ipcns.Pid
	// pidfd signals the exit of the whole thread group; fd is its number,
	// taken once: the watcher must not ask pidfd for it after Close.
	pidfd *os.File
	fd    int32
	// threads are the process's cached Tasks, by tid; guarded by
	// Resolver.mu.
	threads map[int]*Task
	exited  bool // guarded by Resolver.mu
}

// Resolver identifies calling threads and caches what is costly to learn.
// It is safe for concurrent use.
type Resolver struct {
	proc string // procfs mount, "/proc"
	// CheckIPCNS makes Resolve reread the IPC namespace link on every
	// call (a thread can unshare(CLONE_NEWIPC) or setns without any other
	// visible change). It costs a readlink per call; see the benchmarks.
	CheckIPCNS bool
	// onExit is called, on its own goroutine, when a process that made
	// calls has exited.
	onExit func(*ipcns.Pid)

	// mu guards the maps, closed and the fields of process marked so.
	mu      sync.Mutex
	closed  bool
	threads map[int]*Task
	procs   map[int]*process
	pidns   map[uint64]*ipcns.PidNamespace // by nsfs inode
	rootNS  *ipcns.PidNamespace            // the shim's own pid namespace
	byFd    map[int32]*process             // live processes by pidfd number

	// ep is an epoll fd holding every live process's pidfd, polled
	// without waiting by Reap.
	ep int
}

// NewResolver returns a resolver reading procfs at /proc, which must be
// mounted for the shim's pid namespace. onExit is called once per process
// that was resolved, after its last thread exited.
func NewResolver(onExit func(*ipcns.Pid)) (*Resolver, error) {
	ino, err := nsInode("/proc/self/ns/pid")
	if err != nil {
		return nil, err
	}
	root := ipcns.NewPidNamespace(nil, ino)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	return &Resolver{
		proc: "/proc", CheckIPCNS: true, onExit: onExit,
		threads: make(map[int]*Task), procs: make(map[int]*process),
		pidns: map[uint64]*ipcns.PidNamespace{ino: root}, rootNS: root,
		byFd: make(map[int32]*process), ep: ep,
	}, nil
}

// Reap handles, before it returns, the exit of every process whose exit
// is already visible (its pidfd is readable), without waiting. The
// kernel applies SEM_UNDO before a parent can learn of a child's exit;
// calling Reap before serving each call gives the same order: a call made
// after its maker saw another process exit sees that process's
// adjustments applied. Processes' exits are also handled asynchronously
// (promptly, with no call needed).
func (r *Resolver) Reap() {
	var evs [8]unix.EpollEvent
	for {
		n, err := unix.EpollWait(r.ep, evs[:], 0)
		if err != nil || n <= 0 {
			return
		}
		for _, ev := range evs[:n] {
			r.mu.Lock()
			p := r.byFd[ev.Fd]
			r.mu.Unlock()
			if p != nil {
				r.exit(p, true)
			}
		}
		if n < len(evs) {
			return
		}
	}
}

// Resolve returns the Task of thread tid. A cached Task is checked for
// liveness and credential changes with one PIDFD_GET_INFO ioctl (and, with
// CheckIPCNS, one readlink); a new one costs a pidfd, /proc/<tid>/status
// and the namespace links. The caller must still check the notification
// with ID_VALID before acting (see Task).
func (r *Resolver) Resolve(tid int) (*Task, error) {
	t, _, err := r.resolve(tid, r.CheckIPCNS)
	return t, err
}

// resolve is Resolve, with checkNS in place of CheckIPCNS, also reporting
// whether the Task came from the cache.
func (r *Resolver) resolve(tid int, checkNS bool) (*Task, bool, error) {
	r.mu.Lock()
	t := r.threads[tid]
	r.mu.Unlock()
	if t != nil {
		ok, err := r.fresh(t, checkNS)
		if err != nil {
			return nil, false, err
		}
		if ok {
			return t, true, nil
		}
		r.drop(t)
	}
	t, err := r.build(tid)
	return t, false, err
}

// Forget drops the cached Task of thread tid, if any: its next call
// rebuilds it (used when the thread may have changed namespace).
func (r *Resolver) Forget(tid int) {
	r.mu.Lock()
	t := r.threads[tid]
	r.mu.Unlock()
	if t != nil {
		r.drop(t)
	}
}

// fresh reports whether cached t still describes thread t.Tid.
//
// Capabilities are not part of the check: capset(2) changes them without
// an id, so the engines read them live when one decides a check
// (Task.liveCaps). Supplementary groups are not rechecked (no call reads
// another task's groups for less than a /proc/<tid>/status read, ~30 µs):
// where the filter traps setgroups(2) the gateway forgets the Task as the
// call passes (Forget); elsewhere a setgroups that changes no id is seen
// at the thread's next id change or exec.
func (r *Resolver) fresh(t *Task, checkNS bool) (bool, error) {
	t.mu.Lock()
	k, err := credKey{}, error(unix.EBADF)
	if t.pidfd >= 0 {
		k, err = pidfdCreds(t.pidfd)
	}
	t.mu.Unlock()
	if err != nil {
		// ESRCH: the thread is dead and its tid may be reused.
		return false, nil
	}
	if k != t.key {
		return false, nil
	}
	if checkNS {
		ino, err := nsInode(r.proc + "/" + strconv.Itoa(t.Tid) + "/ns/ipc")
		if err != nil {
			return false, nil
		}
		if ino != t.IPCNS {
			return false, nil
		}
	}
	return true, nil
}

// liveCaps returns the thread's effective capabilities now, read by tid
// and then bound to the task: if the pidfd's task is still alive after the
// capget, the tid named it. A task that is gone holds none.
func (t *Task) liveCaps() ipcns.CapSet {
	caps, err := capEff(t.Tid)
	if err != nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pidfd < 0 {
		return 0
	}
	if _, err := pidfdCreds(t.pidfd); err != nil {
		return 0
	}
	return ipcns.CapSet(caps)
}

// capEff returns thread tid's effective capability set (capget(2): one
// cheap call, where /proc/<tid>/status costs a file read and a parse).
func capEff(tid int) (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3, Pid: int32(tid)}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, err
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), nil
}

func pidfdCreds(pidfd int) (credKey, error) {
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_CREDS}
	if err := unix.IoctlPidfdInfo(pidfd, &info); err != nil {
		return credKey{}, err
	}
	return keyOf(&info), nil
}

func keyOf(info *unix.PidfdInfo) credKey {
	return credKey{info.Ruid, info.Euid, info.Suid, info.Fsuid, info.Rgid, info.Egid, info.Sgid, info.Fsgid}
}

// drop forgets t and releases its fds.
func (r *Resolver) drop(t *Task) {
	r.mu.Lock()
	if r.threads[t.Tid] == t {
		delete(r.threads, t.Tid)
	}
	if t.proc != nil && t.proc.threads[t.Tid] == t {
		delete(t.proc.threads, t.Tid)
	}
	r.mu.Unlock()
	t.release()
}

func (t *Task) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, fd := range []*int{&t.memfd, &t.pidfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// build learns everything about thread tid.
func (r *Resolver) build(tid int) (*Task, error) {
	pidfd, err := unix.PidfdOpen(tid, unix.PIDFD_THREAD)
	if err != nil {
		if err == unix.ESRCH {
			return nil, ErrTaskGone
		}
		return nil, fmt.Errorf("pidfd_open(%d): %w", tid, err)
	}
	t := &Task{Tid: tid, pidfd: pidfd, memfd: -1}
	fail := func(err error) (*Task, error) {
		unix.Close(pidfd)
		return nil, err
	}
	if t.key, err = pidfdCreds(pidfd); err != nil {
		return fail(ErrTaskGone)
	}
	dir := r.proc + "/" + strconv.Itoa(tid)
	st, err := readStatus(dir)
	if err != nil {
		return fail(err)
	}
	t.Tgid = st.tgid
	if t.IPCNS, err = nsInode(dir + "/ns/ipc"); err != nil {
		return fail(err)
	}
	uidMap, err := readIDMap(dir + "/uid_map")
	if err != nil {
		return fail(err)
	}
	gidMap, err := readIDMap(dir + "/gid_map")
	if err != nil {
		return fail(err)
	}
	c := &t.Caller.Creds
	c.EUID = uidMap.toInner(st.euid)
	c.EGID = gidMap.toInner(st.egid)
	c.FSGID = gidMap.toInner(st.fsgid)
	for _, g := range st.groups {
		c.Groups = append(c.Groups, gidMap.toInner(g))
	}
	c.Caps = ipcns.CapSet(st.capEff)
	c.LiveCaps = t.liveCaps
	pidNS, err := r.pidNamespace(dir, len(st.nstgid))
	if err != nil {
		return fail(err)
	}
	// Everything above was read through /proc/<tid>: it described the
	// pidfd's task if that task is still alive now, with the same
	// credentials.
	if k, err := pidfdCreds(pidfd); err != nil || k != t.key {
		return fail(ErrTaskGone)
	}
	proc, err := r.process(t.Tgid, pidNS, st.nstgid)
	if err != nil {
		return fail(err)
	}
	t.proc = proc
	t.Caller.Pid = proc.pid
	if tid != t.Tgid && len(st.nspid) == len(st.nstgid) {
		t.Thread = ipcns.NewPid(pidNS, st.nspid...)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if proc.exited {
		return fail(ErrTaskGone)
	}
	if old := r.threads[tid]; old != nil {
		delete(old.proc.threads, tid)
		defer old.release()
	}
	r.threads[tid] = t
	proc.threads[tid] = t
	return t, nil
}

// process returns the live process tgid, making it on first sight. An
// entry whose process has exited (its tgid may be reused) is replaced.
func (r *Resolver) process(tgid int, ns *ipcns.PidNamespace, nrs []int32) (*process, error) {
	r.mu.Lock()
	p := r.procs[tgid]
	r.mu.Unlock()
	if p != nil && !exited(p.pidfd) {
		return p, nil
	}
	fd, err := unix.PidfdOpen(tgid, unix.PIDFD_NONBLOCK)
	if err != nil {
		if err == unix.ESRCH {
			return nil, ErrTaskGone
		}
		return nil, fmt.Errorf("pidfd_open(%d): %w", tgid, err)
	}
	np := &process{tgid: tgid, pid: ipcns.NewPid(ns, nrs...), pidfd: os.NewFile(uintptr(fd), "pidfd"), threads: map[int]*Task{}}
	r.mu.Lock()
	if cur := r.procs[tgid]; cur != nil && cur != p && !exited(cur.pidfd) {
		// Another listener's goroutine made it first.
		r.mu.Unlock()
		np.pidfd.Close()
		return cur, nil
	}
	r.procs[tgid] = np
	pfd := int32(np.pidfd.Fd())
	np.fd = pfd
	r.byFd[pfd] = np
	r.mu.Unlock()
	_ = unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, int(pfd), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: pfd})
	go r.watch(np)
	return np, nil
}

// exited reports whether a process pidfd says its process has exited.
func exited(f *os.File) bool {
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// watch waits, in the netpoller, for p's exit, then forgets p and its
// threads and reports the exit.
func (r *Resolver) watch(p *process) {
	rc, err := p.pidfd.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(fds, 0)
			return n > 0
		})
	}
	r.exit(p, err == nil)
	r.mu.Lock()
	if r.byFd[p.fd] == p {
		delete(r.byFd, p.fd)
	}
	closed := r.closed
	r.mu.Unlock()
	if closed {
		// Close closed the pidfd (that is what ended the wait) and the
		// epoll set: the number may already name another file.
		return
	}
	_ = unix.EpollCtl(r.ep, unix.EPOLL_CTL_DEL, int(p.fd), nil)
	p.pidfd.Close()
}

// exit forgets p and its threads and reports its exit (if report), once.
func (r *Resolver) exit(p *process, report bool) {
	r.mu.Lock()
	if p.exited {
		r.mu.Unlock()
		return
	}
	p.exited = true
	if r.procs[p.tgid] == p {
		delete(r.procs, p.tgid)
	}
	var dead []*Task
	for tid, t := range p.threads {
		if r.threads[tid] == t {
			delete(r.threads, tid)
		}
		dead = append(dead, t)
	}
	p.threads = nil
	closed := r.closed
	r.mu.Unlock()
	for _, t := range dead {
		t.release()
	}
	if r.onExit != nil && !closed && report {
		r.onExit(p.pid)
	}
}

// Close releases every cached Task and stops watching processes (their
// exits are no longer reported).
func (r *Resolver) Close() {
	r.mu.Lock()
	r.closed = true
	procs := make([]*process, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	defer unix.Close(r.ep)
	for _, p := range procs {
		// Ends the watcher's wait with an error; it then releases the
		// process's Tasks.
		p.pidfd.Close()
	}
}

// pidNamespace returns the pid namespace of the task at dir, whose
// namespace is depth levels below the shim's (NStgid has depth numbers),
// registering the chain of namespaces on first sight by nsfs inode.
func (r *Resolver) pidNamespace(dir string, depth int) (*ipcns.PidNamespace, error) {
	if depth <= 1 {
		return r.rootNS, nil
	}
	fd, err := unix.Open(dir+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open pid namespace: %w", err)
	}
	// inodes from the task's namespace up to the child of the root.
	inos := make([]uint64, 0, depth-1)
	for i := 0; i < depth-1; i++ {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, err
		}
		inos = append(inos, st.Ino)
		if i == depth-2 {
			break
		}
		parent, err := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("NS_GET_PARENT: %w", err)
		}
		fd = parent
	}
	unix.Close(fd)
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.rootNS
	for i := len(inos) - 1; i >= 0; i-- {
		child := r.pidns[inos[i]]
		if child == nil || child.Parent() != ns {
			child = ipcns.NewPidNamespace(ns, inos[i])
			r.pidns[inos[i]] = child
		}
		ns = child
	}
	return ns, nil
}

// nsInode returns the inode of a /proc/.../ns/* link ("ipc:[4026531839]").
func nsInode(path string) (uint64, error) {
	var buf [64]byte
	n, err := unix.Readlink(path, buf[:])
	if err != nil {
		return 0, fmt.Errorf("readlink %s: %w", path, err)
	}
	s := buf[:n]
	i, j := bytes.IndexByte(s, '['), bytes.IndexByte(s, ']')
	if i < 0 || j < i {
		return 0, fmt.Errorf("readlink %s: unexpected %q", path, s)
	}
	return strconv.ParseUint(string(s[i+1:j]), 10, 64)
}

type status struct {
	tgid              int
	euid, egid, fsgid uint32
	groups            []uint32
	capEff            uint64
	nstgid            []int32
	nspid             []int32
}

func readStatus(dir string) (*status, error) {
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		if errors.Is(err, unix.ESRCH) || errors.Is(err, os.ErrNotExist) {
			return nil, ErrTaskGone
		}
		return nil, err
	}
	return parseStatus(b)
}

func parseStatus(b []byte) (*status, error) {
	st := &status{}
	seen := 0
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		f := strings.Fields(string(v))
		var err error
		switch string(k) {
		case "Tgid":
			seen |= 1
			st.tgid, err = strconv.Atoi(f[0])
		case "Uid":
			seen |= 2
			st.euid, err = field32(f, 1)
		case "Gid":
			seen |= 4
			if st.egid, err = field32(f, 1); err == nil {
				st.fsgid, err = field32(f, 3)
			}
		case "Groups":
			for i := range f {
				g, gerr := field32(f, i)
				if gerr != nil {
					err = gerr
					break
				}
				st.groups = append(st.groups, g)
			}
		case "NStgid":
			seen |= 8
			for _, s := range f {
				n, nerr := strconv.ParseInt(s, 10, 32)
				if nerr != nil {
					err = nerr
					break
				}
				st.nstgid = append(st.nstgid, int32(n))
			}
		case "NSpid":
			for _, s := range f {
				n, nerr := strconv.ParseInt(s, 10, 32)
				if nerr != nil {
					err = nerr
					break
				}
				st.nspid = append(st.nspid, int32(n))
			}
		case "CapEff":
			seen |= 16
			st.capEff, err = strconv.ParseUint(strings.TrimSpace(string(v)), 16, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("status field %s: %w", k, err)
		}
	}
	if seen != 31 {
		return nil, fmt.Errorf("status: missing fields (have %05b)", seen)
	}
	return st, nil
}

func field32(f []string, i int) (uint32, error) {
	if i >= len(f) {
		return 0, errors.New("short field")
	}
	n, err := strconv.ParseUint(f[i], 10, 32)
	return uint32(n), err
}

// idMap is a uid_map or gid_map as the shim reads it: inner outer count.
type idMap [][3]uint32

// overflowID is the kernel's overflowuid/overflowgid for unmapped ids.
const overflowID = 65534

func readIDMap(path string) (idMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m idMap
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		var e [3]uint32
		for i := range e {
			n, err := strconv.ParseUint(f[i], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			e[i] = uint32(n)
		}
		m = append(m, e)
	}
	return m, nil
}

// toInner maps an id as the shim sees it to the task's user namespace.
func (m idMap) toInner(id uint32) uint32 {
	for _, e := range m {
		if id >= e[1] && uint64(id) < uint64(e[1])+uint64(e[2]) {
			return e[0] + (id - e[1])
		}
	}
	return overflowID
}
