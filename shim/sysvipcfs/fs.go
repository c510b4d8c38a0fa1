// Package sysvipcfs is the file system that shows a container the shim's
// System V IPC objects where util-linux looks for them: a small FUSE file
// system served by the shim and mounted, file by file, over the
// container's /proc/sysvipc and the IPC entries of /proc/sys/kernel.
//
// # Why FUSE, and how it gets into the container
//
// The engines hold the objects, so the kernel's /proc/sysvipc/sem and msg
// are empty inside a trapped container and ipcs, lsipc and ipcrm -a see
// nothing. runc refuses spec mounts under /proc (except a short
// allow-list), and the kernel's files cannot be fed from userspace, so the
// shim serves the files itself: one FUSE connection per container, whose
// tree is
//
//	sysvipc/sem  sysvipc/msg  sysvipc/shm          (0444)
//	sys/sem  sys/msgmax  sys/msgmnb  sys/msgmni    (0644)
//	sys/sem_next_id  sys/msg_next_id               (0444, as procfs)
//
// Mount builds the mounts with the new mount API, entirely from the shim:
// fsopen("fuse") and fsconfig with the shim's open /dev/fuse fd make the
// super block, go-fuse serves that fd (its /dev/fd/N convention: it does
// no mount of its own), fsmount gives a detached mount, and open_tree
// (OPEN_TREE_CLONE) cuts one detached bind mount per target out of it.
// Only attaching them needs the container's mount namespace: move_mount
// resolves its target in the caller's namespace (and the sysctl entries
// are looked up per IPC namespace, so it enters the container's IPC
// namespace too). setns(CLONE_NEWNS) is
// refused to a thread that shares its fs_struct, which every Go thread
// does; so one goroutine locks its OS thread, unshare(CLONE_FS)es it,
// enters the namespace, attaches the mounts, and exits still locked, which
// makes the Go runtime end that thread instead of reusing it. No helper
// process and no hook is needed, and the shim does it between runc create
// and start, when the container's mounts are final and nothing in it runs.
//
// /proc/sysvipc is mounted read-only; each sysctl file is read-only
// exactly when the /proc/sys it covers is (runc's readonlyPaths: every
// unprivileged container), so a write fails with EROFS as it would, and a
// privileged container's write reaches the shim.
//
// # Robustness
//
// The FUSE connection lives in the shim process: if the shim dies, the
// kernel aborts the connection and readers get ENOTCONN at once, never a
// hang. The shim keeps no reference to the mounts once they are attached
// (the fs context, the detached mount and the clones are closed), so when
// the container's last process exits its mount namespace goes, the super
// block goes with its last mount, and the server loop ends (ENODEV).
// Close aborts the connection explicitly through fusectl when it is
// mounted, for a namespace kept alive by someone else. A file's content is
// made at open, from the Source, and served with direct I/O, so every open
// sees the live state, as a read of the kernel's seq_file does.
package sysvipcfs

import (
	"context"
	"errors"
	"fmt"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/osthread"
	"os"
	"path"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Reader identifies the process that opened a file, as FUSE reports it:
// pid (thread id) in the shim's pid namespace and fs credentials.
type Reader struct {
	Pid      int
	UID, GID uint32
}

// Source makes the files' contents.
type Source interface {
	// Sysvipc returns /proc/sysvipc/<name> (sem, msg or shm) as r reads it.
	Sysvipc(name string, r Reader) ([]byte, error)
	// ReadSysctl returns /proc/sys/kernel/<name> as r reads it.
	ReadSysctl(name string, r Reader) ([]byte, error)
	// WriteSysctl applies a write of value to /proc/sys/kernel/<name> by
	// r; an error that is a syscall.Errno is returned as it is.
	WriteSysctl(name string, value []byte, r Reader) error
}

// SysvipcFiles are the files of /proc/sysvipc.
var SysvipcFiles = []string{"sem", "msg", "shm"}

// SysctlFiles are the /proc/sys/kernel entries the file system serves.
var SysctlFiles = []string{"sem", "msgmax", "msgmnb", "msgmni", "sem_next_id", "msg_next_id"}

// sysctlMode is the mode procfs shows: the *_next_id entries are 0444
// (Linux lets a CAP_CHECKPOINT_RESTORE holder write them regardless; here
// root passes the mode check with CAP_DAC_OVERRIDE and the Source checks
// the capability).
func sysctlMode(name string) uint32 {
	if name == "sem_next_id" || name == "msg_next_id" {
		return 0o444
	}
	return 0o644
}

// Options say where the files go in the target mount namespace.
type Options struct {
	// SysvipcDir is the directory the sysvipc/ tree is mounted on,
	// "/proc/sysvipc" unless set; "-" mounts none.
	SysvipcDir string
	// SysctlDir is the directory holding the sysctl files each of ours is
	// mounted on, "/proc/sys/kernel" unless set; "-" mounts none.
	SysctlDir string
	// Logf reports what a mount did not do; nil discards.
	Logf func(format string, args ...any)
}

// FS is one mounted instance.
type FS struct {
	srv   *fuse.Server
	dev   uint64 // the super block's device, for fusectl
	done  chan struct{}
	once  sync.Once
	Stats Stats
}

// Stats count the file system's work.
type Stats struct {
	mu    sync.Mutex
	Opens int64
	Bytes int64
	Time  time.Duration // spent in Source calls
}

func (s *Stats) add(n int, d time.Duration) {
	s.mu.Lock()
	s.Opens++
	s.Bytes += int64(n)
	s.Time += d
	s.mu.Unlock()
}

// Snapshot returns the counters.
func (s *Stats) Snapshot() (opens, bytes int64, t time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Opens, s.Bytes, s.Time
}

// Mount serves src and mounts its files in the mount namespace of process
// pid (see the package comment).
func Mount(src Source, pid int, o Options) (_ *FS, err error) {
	if o.SysvipcDir == "" {
		o.SysvipcDir = "/proc/sysvipc"
	}
	if o.SysctlDir == "" {
		o.SysctlDir = "/proc/sys/kernel"
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	mntns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return nil, err
	}
	defer mntns.Close()
	// The sysctl entries of /proc/sys/kernel are looked up per IPC
	// namespace (each has its own dentries): the attaching thread must be
	// in the container's, or it mounts over the host's entries, which the
	// container's processes never look up.
	ipcns, err := os.Open(fmt.Sprintf("/proc/%d/ns/ipc", pid))
	if err != nil {
		return nil, err
	}
	defer ipcns.Close()

	devfd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	served := false
	defer func() {
		if !served {
			unix.Close(devfd)
		}
	}()
	fsfd, err := unix.Fsopen("fuse", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen fuse: %w", err)
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"source", "sysvipc"}, {"fd", strconv.Itoa(devfd)}, {"rootmode", "40555"},
		{"user_id", "0"}, {"group_id", "0"}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("fsconfig %s=%s: %w", kv[0], kv[1], err)
		}
	}
	for _, f := range []string{"allow_other", "default_permissions"} {
		if err := unix.FsconfigSetFlag(fsfd, f); err != nil {
			return nil, fmt.Errorf("fsconfig %s: %w", f, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("fsconfig create: %w", err)
	}

	f := &FS{done: make(chan struct{})}
	root := &dir{}
	zero := time.Duration(0)
	// No entry or attribute caching: every open looks the file up again,
	// which resets its size to sizeBound (see file.Getattr).
	rawfs := fs.NewNodeFS(root, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		OnAdd: func(ctx context.Context) { root.build(ctx, src, &f.Stats) },
	})
	// The kernel sent INIT at fsconfig create; NewServer answers it.
	srv, err := fuse.NewServer(rawfs, "/dev/fd/"+strconv.Itoa(devfd), &fuse.MountOptions{
		Name: "sysvipc", FsName: "sysvipc", DisableXAttrs: true, MaxBackground: 4,
	})
	if err != nil {
		return nil, fmt.Errorf("fuse init: %w", err)
	}
	served = true // the server owns devfd now
	f.srv = srv
	go func() {
		srv.Serve()
		close(f.done)
	}()
	defer func() {
		if err != nil {
			f.Close()
		}
	}()

	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(mfd)
	var st unix.Stat_t
	if err := unix.Fstat(mfd, &st); err == nil {
		f.dev = st.Dev
	}

	type attach struct {
		fd     int
		target string
		ro     bool // always read-only; else as the target's mount
	}
	var todo []attach
	defer func() {
		for _, a := range todo {
			unix.Close(a.fd)
		}
	}()
	clone := func(p, target string, ro bool) error {
		fd, err := unix.OpenTree(mfd, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("open_tree %s: %w", p, err)
		}
		todo = append(todo, attach{fd, target, ro})
		return nil
	}
	if o.SysvipcDir != "-" {
		if err := clone("sysvipc", o.SysvipcDir, true); err != nil {
			return nil, err
		}
	}
	if o.SysctlDir != "-" {
		for _, n := range SysctlFiles {
			if err := clone("sys/"+n, path.Join(o.SysctlDir, n), false); err != nil {
				return nil, err
			}
		}
	}

	// Attach from a thread of its own in the container's mount namespace,
	// thrown away afterwards (never the main thread, which the runtime
	// would park forever, pinning the namespace).
	err = osthread.Run(func() error {
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unshare(CLONE_FS): %w", err)
		}
		if err := unix.Setns(int(mntns.Fd()), unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("setns(mnt of pid %d): %w", pid, err)
		}
		if err := unix.Setns(int(ipcns.Fd()), unix.CLONE_NEWIPC); err != nil {
			return fmt.Errorf("setns(ipc of pid %d): %w", pid, err)
		}
		for _, a := range todo {
			ro := a.ro
			if !ro {
				var sfs unix.Statfs_t
				if err := unix.Statfs(a.target, &sfs); err != nil {
					logf("sysvipcfs: %s: %v: not mounted", a.target, err)
					continue
				}
				ro = sfs.Flags&unix.ST_RDONLY != 0
			}
			if ro {
				if err := unix.MountSetattr(a.fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
					return fmt.Errorf("mount_setattr %s: %w", a.target, err)
				}
			}
			if err := unix.MoveMount(a.fd, "", unix.AT_FDCWD, a.target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("move_mount onto %s: %w", a.target, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Done is closed when the server has stopped (the connection was aborted
// or every mount of it is gone).
func (f *FS) Done() <-chan struct{} { return f.done }

// Close stops serving: it aborts the FUSE connection through fusectl
// (/sys/fs/fuse/connections) when that is mounted; otherwise the server
// stops when the container's mount namespace, its last user, goes.
// Readers of a file still mounted get ENOTCONN.
func (f *FS) Close() error {
	var err error
	f.once.Do(func() {
		if f.dev == 0 {
			return
		}
		p := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", f.dev)
		if e := os.WriteFile(p, []byte("1"), 0); e != nil && !errors.Is(e, os.ErrNotExist) {
			err = e
		}
	})
	return err
}

// dir is a directory of the tree.
type dir struct{ fs.Inode }

var _ = (fs.NodeGetattrer)((*dir)(nil))

func (d *dir) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o555
	out.Nlink = 2
	return 0
}

func (d *dir) build(ctx context.Context, src Source, st *Stats) {
	sv := d.NewPersistentInode(ctx, &dir{}, fs.StableAttr{Mode: syscall.S_IFDIR})
	d.AddChild("sysvipc", sv, false)
	for _, n := range SysvipcFiles {
		sv.AddChild(n, sv.NewPersistentInode(ctx, &file{name: n, src: src, st: st, mode: 0o444}, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
	sc := d.NewPersistentInode(ctx, &dir{}, fs.StableAttr{Mode: syscall.S_IFDIR})
	d.AddChild("sys", sc, false)
	for _, n := range SysctlFiles {
		sc.AddChild(n, sc.NewPersistentInode(ctx, &file{name: n, src: src, st: st, mode: sysctlMode(n), sysctl: true}, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

// file is one served file.
type file struct {
	fs.Inode
	name   string
	src    Source
	st     *Stats
	mode   uint32
	sysctl bool
}

var (
	_ = (fs.NodeGetattrer)((*file)(nil))
	_ = (fs.NodeSetattrer)((*file)(nil))
	_ = (fs.NodeOpener)((*file)(nil))
	_ = (fs.NodeReader)((*file)(nil))
	_ = (fs.NodeWriter)((*file)(nil))
	_ = (fs.NodeFlusher)((*file)(nil))
)

func (f *file) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | f.mode
	// procfs reports size 0, but FUSE serves splice (sendfile, which
	// busybox cat uses) from the page cache, which ends at the inode's
	// size: with 0 it reads nothing. So the size is the content's length
	// now; every open looks the file up again (no entry or attribute
	// caching), which refreshes it, and a read that comes up short tells
	// the kernel where the file really ends. Not a large constant:
	// readers such as Go's os.ReadFile size their buffer by st_size.
	out.Size = uint64(len(f.content(ctx)))
	out.Nlink = 1
	return 0
}

// content renders the file for the reader in ctx; errors read as empty.
func (f *file) content(ctx context.Context) []byte {
	var b []byte
	if f.sysctl {
		b, _ = f.src.ReadSysctl(f.name, reader(ctx))
	} else {
		b, _ = f.src.Sysvipc(f.name, reader(ctx))
	}
	return b
}

// Setattr accepts the truncation that open(O_TRUNC) sends (sysctl and
// shell redirections write that way); procfs ignores it too.
func (f *file) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !f.sysctl {
		return syscall.EACCES
	}
	return f.Getattr(ctx, nil, out)
}

func reader(ctx context.Context) Reader {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return Reader{}
	}
	return Reader{Pid: int(c.Pid), UID: c.Uid, GID: c.Gid}
}

// handle is an open file: its content, made at open.
type handle struct {
	data []byte
	err  error
}

func errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

func (f *file) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h := &handle{}
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		t := time.Now()
		if f.sysctl {
			h.data, h.err = f.src.ReadSysctl(f.name, reader(ctx))
		} else {
			h.data, h.err = f.src.Sysvipc(f.name, reader(ctx))
		}
		f.st.add(len(h.data), time.Since(t))
		if h.err != nil {
			return nil, 0, errno(h.err)
		}
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (f *file) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(h.data[off:min(int64(len(h.data)), off+int64(len(dest)))]), 0
}

// Flush answers ENOSYS once: the kernel then stops sending FLUSH on
// close (nothing is cached to flush), saving a round trip per close.
func (f *file) Flush(ctx context.Context, _ fs.FileHandle) syscall.Errno { return syscall.ENOSYS }

func (f *file) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if !f.sysctl {
		return 0, syscall.EACCES
	}
	if off != 0 {
		// kernel.sysctl_writes_strict: a write past the start of an
		// integer entry is ignored.
		return uint32(len(data)), 0
	}
	if err := f.src.WriteSysctl(f.name, data, reader(ctx)); err != nil {
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}
