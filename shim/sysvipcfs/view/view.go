// Package view is the in-container view: /proc/sysvipc/{sem,msg} and the
// IPC sysctls of /proc/sys/kernel inside a trapped container show the
// engines' state, served by shim/sysvipcfs (see its package comment for
// the mounts).
//
// What a file shows:
//
//   - sysvipc/sem, sysvipc/msg: the engine namespace of the opener's IPC
//     namespace (the kernel shows the opener's too), or of the container's
//     for an opener in an IPC namespace this shim does not serve (a host
//     process reading through /proc/<pid>/root). msg's lspid and lrpid are
//     numbers in the opener's pid namespace, as the kernel prints them; the
//     gateway's Resolver names that namespace.
//   - sysvipc/shm: the kernel's file of the container's IPC namespace (shm
//     is not trapped), read through an fd the shim opened from a thread
//     that entered that namespace.
//   - kernel.sem, msgmax, msgmnb, msgmni: the engine namespace's limits,
//     exactly what it enforces. kernel.sem_next_id, msg_next_id: the
//     registries' pending id, -1 once a creation consumed it, as Linux.
//
// A write (a privileged container: an unprivileged one's /proc/sys, and so
// our file, is read-only) goes first to the kernel's entry of the
// container's IPC namespace, through an fd opened there: the kernel parses
// and validates it exactly as it would (EINVAL for a semmni above 32768, a
// non-number, a negative msgmax...), and its IPC namespace keeps the value
// runc and the host see. The value the kernel then holds is read back and
// becomes the engine's. A write of *_next_id needs CAP_CHECKPOINT_RESTORE
// or CAP_SYS_ADMIN, as Linux checks.
//
// A value changed behind the container's back (a host process that
// entered only the IPC namespace and wrote its /proc/sys) is picked up the
// next time the container reads or writes one of the limit entries: each
// such access compares the kernel's four limits with the ones last
// applied. Nothing is done on the trapped path: SetLimits is an atomic
// pointer store the engines already read per call.
package view

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/msgengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/sysvipcfs"
)

// ViewAnnotation, set to "false" on a container, leaves its /proc alone
// (the kernel's, empty, /proc/sysvipc/sem and msg).
const ViewAnnotation = "io.containerd.ipc.v2.procview"

// Views are the mounted views, by container.
type Views struct {
	// lookup returns the engine namespace of an IPC namespace inode, nil
	// if the shim has none (it makes none).
	lookup func(ino uint64) *gateway.Engines
	res    *gateway.Gateway
	// Logf reports; nil discards.
	Logf func(format string, args ...any)

	mu   sync.Mutex
	byID map[string]*View
}

// NewViews returns an empty set serving the engine namespaces lookup
// finds; res (may be nil) names readers' pid namespaces.
func NewViews(lookup func(ino uint64) *gateway.Engines, res *gateway.Gateway) *Views {
	return &Views{lookup: lookup, res: res, byID: map[string]*View{}}
}

func (vs *Views) logf(f string, a ...any) {
	if vs.Logf != nil {
		vs.Logf(f, a...)
	}
}

// Wanted reports whether container spec s asks for the view (the default).
func Wanted(s *specs.Spec) bool {
	return s == nil || s.Annotations[ViewAnnotation] != "false"
}

// Attach mounts the view into the container whose init is pid (created,
// not started).
func (vs *Views) Attach(id string, pid int) (*View, error) {
	ino, err := gateway.IPCNamespace(pid)
	if err != nil {
		return nil, err
	}
	k, err := openKernelFiles(pid)
	if err != nil {
		return nil, fmt.Errorf("open the IPC namespace's kernel files: %w", err)
	}
	v := &View{vs: vs, id: id, ino: ino, k: k}
	v.pidIno, _ = viewNSInode(fmt.Sprintf("/proc/%d/ns/pid", pid))
	v.last, _ = k.limits()
	f, err := sysvipcfs.Mount(v, pid, sysvipcfs.Options{Logf: vs.Logf})
	if err != nil {
		k.close()
		return nil, err
	}
	v.fs = f
	vs.mu.Lock()
	old := vs.byID[id]
	vs.byID[id] = v
	vs.mu.Unlock()
	if old != nil {
		old.close()
	}
	go func() {
		// The server ends when the container's mount namespace goes.
		<-f.Done()
		k.close()
		vs.logf("container %s: /proc/sysvipc view stopped (its mount namespace is gone)", id)
	}()
	return v, nil
}

// Detach stops serving container id's view.
func (vs *Views) Detach(id string) {
	vs.mu.Lock()
	v := vs.byID[id]
	delete(vs.byID, id)
	vs.mu.Unlock()
	if v != nil {
		v.close()
	}
}

// Get returns container id's view, or nil.
func (vs *Views) Get(id string) *View {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return vs.byID[id]
}

// View is one container's mounted view.
type View struct {
	vs  *Views
	id  string
	ino uint64 // the container's kernel IPC namespace
	k   *kernelFiles
	fs  *sysvipcfs.FS

	mu   sync.Mutex
	last ipcns.Limits // the kernel's limits last applied to the engine

	// The container's own pid namespace, as the gateway names it, found
	// on the first read of msg by one of its processes: most readers are
	// there, and naming it costs a Resolve (pidfd, /proc reads).
	pidIno uint64
	pidMu  sync.Mutex
	pidNS  *ipcns.PidNamespace
}

// FS returns the mounted file system (for its Stats).
func (v *View) FS() *sysvipcfs.FS { return v.fs }

func (v *View) close() {
	v.fs.Close()
}

// engines returns the engines and namespace inode for reader r: the
// reader's IPC namespace when this shim serves it, else the container's;
// nil while the container's namespace has no engine yet.
func (v *View) engines(r sysvipcfs.Reader) (*gateway.Engines, uint64) {
	if r.Pid > 0 {
		if ino, err := gateway.IPCNamespace(r.Pid); err == nil && ino != v.ino {
			if e := v.vs.lookup(ino); e != nil {
				return e, ino
			}
		}
	}
	return v.vs.lookup(v.ino), v.ino
}

var (
	emptySem = semengine.New(ipcns.NewResources("", ipcns.DefaultLimits())).ProcSysvipc()
	emptyMsg = msgengine.New(ipcns.NewResources("", ipcns.DefaultLimits())).ProcSysvipc(nil)
)

// Sysvipc serves /proc/sysvipc/<name> (sysvipcfs.Source).
func (v *View) Sysvipc(name string, r sysvipcfs.Reader) ([]byte, error) {
	switch name {
	case "shm":
		return v.k.read(v.k.shm)
	case "sem":
		e, _ := v.engines(r)
		if e == nil {
			return emptySem, nil
		}
		return e.Sem().ProcSysvipc(), nil
	case "msg":
		e, _ := v.engines(r)
		if e == nil {
			return emptyMsg, nil
		}
		return e.Msg().ProcSysvipc(v.pidNamespace(r)), nil
	}
	return nil, syscall.ENOENT
}

// pidNamespace returns the reader's pid namespace as the gateway knows it
// (the engines compare them by identity), or nil (pids shown as 0).
func (v *View) pidNamespace(r sysvipcfs.Reader) *ipcns.PidNamespace {
	if v.vs.res == nil || r.Pid <= 0 {
		return nil
	}
	ino, err := viewNSInode(fmt.Sprintf("/proc/%d/ns/pid", r.Pid))
	own := err == nil && ino == v.pidIno && ino != 0
	if own {
		v.pidMu.Lock()
		ns := v.pidNS
		v.pidMu.Unlock()
		if ns != nil {
			return ns
		}
	}
	ns, err := v.vs.res.PidNamespace(r.Pid)
	if err != nil {
		return nil
	}
	if own {
		v.pidMu.Lock()
		v.pidNS = ns
		v.pidMu.Unlock()
	}
	return ns
}

// viewNSInode returns the inode of a /proc/.../ns/* link.
func viewNSInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// ReadSysctl serves /proc/sys/kernel/<name> (sysvipcfs.Source).
func (v *View) ReadSysctl(name string, r sysvipcfs.Reader) ([]byte, error) {
	e, ino := v.engines(r)
	if e == nil {
		return v.k.read(v.k.sysctl[name])
	}
	switch name {
	case "sem_next_id":
		return fmt.Appendf(nil, "%d\n", e.Sem().Registry().NextID()), nil
	case "msg_next_id":
		return fmt.Appendf(nil, "%d\n", e.Msg().Registry().NextID()), nil
	}
	l := v.sync(e, ino)
	switch name {
	case "sem":
		return []byte(l.SemString() + "\n"), nil
	case "msgmax":
		return fmt.Appendf(nil, "%d\n", l.MsgMax), nil
	case "msgmnb":
		return fmt.Appendf(nil, "%d\n", l.MsgMNB), nil
	case "msgmni":
		return fmt.Appendf(nil, "%d\n", l.MsgMNI), nil
	}
	return nil, syscall.ENOENT
}

// sync applies the kernel's limits to the engine namespace when they
// changed since last applied, and returns the engine's limits.
func (v *View) sync(e *gateway.Engines, ino uint64) ipcns.Limits {
	ns := e.Sem().Resources()
	if ino != v.ino {
		return *ns.Limits() // not the namespace whose kernel files we hold
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	kl, err := v.k.limits()
	if err == nil && kl != v.last {
		v.vs.logf("container %s: IPC limits changed in the kernel's namespace: sem=%s msgmax=%d msgmnb=%d msgmni=%d; applied to the engine",
			v.id, strings.ReplaceAll(kl.SemString(), "\t", " "), kl.MsgMax, kl.MsgMNB, kl.MsgMNI)
		ns.SetLimits(kl)
		v.last = kl
	}
	return *ns.Limits()
}

// WriteSysctl serves a write of /proc/sys/kernel/<name>
// (sysvipcfs.Source).
func (v *View) WriteSysctl(name string, value []byte, r sysvipcfs.Reader) error {
	f := v.k.sysctl[name]
	if f == nil {
		return syscall.ENOENT
	}
	next := name == "sem_next_id" || name == "msg_next_id"
	if next && !hasCap(r.Pid, ipcns.CapSysAdmin, capCheckpointRestore) {
		return syscall.EPERM
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	// The kernel validates; its error is the writer's.
	if _, err := f.WriteAt(value, 0); err != nil {
		if pe, ok := err.(*os.PathError); ok {
			return pe.Err
		}
		return err
	}
	e := v.vs.lookup(v.ino)
	if e == nil {
		return nil // the engine namespace will take the kernel's values when made
	}
	if next {
		b, err := v.k.read(f)
		if err != nil {
			return err
		}
		id, err := strconv.Atoi(string(bytes.TrimSpace(b)))
		if err != nil {
			return syscall.EINVAL
		}
		if name == "sem_next_id" {
			e.Sem().Registry().SetNextID(id)
		} else {
			e.Msg().Registry().SetNextID(id)
		}
		return nil
	}
	kl, err := v.k.limits()
	if err != nil {
		return err
	}
	e.Sem().Resources().SetLimits(kl)
	v.last = kl
	v.vs.logf("container %s: kernel.%s written: limits now sem=%s msgmax=%d msgmnb=%d msgmni=%d",
		v.id, name, strings.ReplaceAll(kl.SemString(), "\t", " "), kl.MsgMax, kl.MsgMNB, kl.MsgMNI)
	return nil
}

const capCheckpointRestore = 40

// hasCap reports whether thread pid has one of caps in its effective set.
func hasCap(pid int, caps ...int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false
			}
			for _, c := range caps {
				if set&(1<<c) != 0 {
					return true
				}
			}
		}
	}
	return false
}

// kernelFiles are the kernel's files of one IPC namespace, opened from a
// thread inside it: /proc/sysvipc/shm and /proc/sys/kernel entries bind to
// the opener's IPC namespace when opened, and keep reading and writing
// that namespace's values from any thread afterwards.
type kernelFiles struct {
	mu     sync.Mutex // one read at a time per file (offsets)
	shm    *os.File
	sysctl map[string]*os.File
}

func openKernelFiles(pid int) (*kernelFiles, error) {
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/ipc", pid))
	if err != nil {
		return nil, err
	}
	defer target.Close()
	self, err := os.Open("/proc/thread-self/ns/ipc")
	if err != nil {
		return nil, err
	}
	defer self.Close()
	type result struct {
		k   *kernelFiles
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWIPC); err != nil {
			runtime.UnlockOSThread()
			c <- result{nil, fmt.Errorf("setns(ipc of pid %d): %w", pid, err)}
			return
		}
		k := &kernelFiles{sysctl: map[string]*os.File{}}
		var err error
		k.shm, err = os.Open("/proc/sysvipc/shm")
		for _, n := range sysvipcfs.SysctlFiles {
			if err != nil {
				break
			}
			k.sysctl[n], err = os.OpenFile("/proc/sys/kernel/"+n, os.O_RDWR, 0)
		}
		if e := unix.Setns(int(self.Fd()), unix.CLONE_NEWIPC); e == nil {
			runtime.UnlockOSThread()
		} // else the thread, still in the container's namespace, ends with the goroutine
		if err != nil {
			k.close()
			k = nil
		}
		c <- result{k, err}
	}()
	r := <-c
	return r.k, r.err
}

func (k *kernelFiles) close() {
	if k.shm != nil {
		k.shm.Close()
	}
	for _, f := range k.sysctl {
		if f != nil {
			f.Close()
		}
	}
}

// read returns f's whole content, read from offset 0.
func (k *kernelFiles) read(f *os.File) ([]byte, error) {
	if f == nil {
		return nil, syscall.ENOENT
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []byte
	buf := make([]byte, 4096)
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err != nil || n == 0 {
			break
		}
	}
	return out, nil
}

// limits reads the namespace's limits from the kernel.
func (k *kernelFiles) limits() (ipcns.Limits, error) {
	l := ipcns.DefaultLimits()
	b, err := k.read(k.sysctl["sem"])
	if err != nil {
		return l, err
	}
	if err := l.SetSem(string(b)); err != nil {
		return l, err
	}
	for _, n := range []string{"msgmax", "msgmnb", "msgmni"} {
		b, err := k.read(k.sysctl[n])
		if err != nil {
			return l, err
		}
		x, err := strconv.Atoi(string(bytes.TrimSpace(b)))
		if err != nil {
			return l, err
		}
		switch n {
		case "msgmax":
			l.MsgMax = x
		case "msgmnb":
			l.MsgMNB = x
		case "msgmni":
			l.MsgMNI = x
		}
	}
	return l, nil
}
