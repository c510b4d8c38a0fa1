package seccompnotify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrClosed is returned by operations on a closed Listener.
var ErrClosed = errors.New("seccompnotify: listener closed")

// Listener is a seccomp listener fd (SECCOMP_FILTER_FLAG_NEW_LISTENER).
// Recv is meant for one goroutine at a time (Serve's); Send and IDValid
// may be called from any goroutine, concurrently.
type Listener struct {
	// f owns the fd; its lifetime is guarded by the os.File machinery
	// only for Close, so the ioctls below go through fd directly and
	// mu keeps Close from racing with them.
	f  *os.File
	fd int

	// mu is held for reading around every ioctl and for writing by
	// Close, so that an fd number is never used after it was closed (and
	// possibly reused for another file).
	mu     sync.RWMutex
	closed bool // under mu

	// syncWakeUp records whether SetSyncWakeUp succeeded.
	syncWakeUp bool
}

// New takes ownership of f, a seccomp listener fd. It checks that the
// kernel's notification structs have the sizes this package was built
// for.
func New(f *os.File) (*Listener, error) {
	if err := CheckSizes(); err != nil {
		f.Close()
		return nil, err
	}
	return &Listener{f: f, fd: int(f.Fd())}, nil
}

// Fd returns the listener's fd number, for logs and tests. The Listener
// still owns it.
func (l *Listener) Fd() int { return l.fd }

// Close closes the listener fd. Every task waiting on it and every later
// trapped call of its filter then fails with ENOSYS, forever: a listener
// cannot be reattached.
func (l *Listener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}

func (l *Listener) ioctl(req uint, arg unsafe.Pointer) error {
	return l.ioctlRaw(req, func(fd uintptr) unix.Errno {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), uintptr(arg))
		return errno
	})
}

func (l *Listener) ioctlVal(req uint, val uintptr) error {
	return l.ioctlRaw(req, func(fd uintptr) unix.Errno {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), val)
		return errno
	})
}

func (l *Listener) ioctlRaw(req uint, call func(fd uintptr) unix.Errno) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	for {
		switch errno := call(uintptr(l.fd)); errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return errno
		}
	}
}

// Recv receives one notification into n, which it zeroes first (the kernel
// refuses a buffer that is not zeroed with EINVAL). It blocks until a
// notification is pending: the kernel ignores O_NONBLOCK, so poll first
// (as Serve does) to avoid blocking forever on a filter without users.
// An error satisfying IsGone means the task left before it could be
// received (a signal or its death): the listener is fine, go on.
func (l *Listener) Recv(n *Notif) error {
	*n = Notif{}
	if err := l.ioctl(unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(n)); err != nil {
		return fmt.Errorf("SECCOMP_IOCTL_NOTIF_RECV: %w", err)
	}
	return nil
}

// Send answers a notification. An error satisfying IsGone means the
// notification is no longer pending: the task was interrupted by a signal
// (and sees EINTR or restarts the call) or died; the reply was not
// delivered.
func (l *Listener) Send(r *Resp) error {
	if err := l.ioctl(unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(r)); err != nil {
		return fmt.Errorf("SECCOMP_IOCTL_NOTIF_SEND: %w", err)
	}
	return nil
}

// Reply answers notification id with return value val, or with errno if
// errno is not 0.
func (l *Listener) Reply(id uint64, val int64, errno unix.Errno) error {
	r := Resp{ID: id, Val: val, Error: -int32(errno)}
	if errno != 0 {
		r.Val = 0
	}
	return l.Send(&r)
}

// Continue lets the kernel run the trapped call itself. Only safe for
// calls whose arguments the supervisor does not interpret (the kernel
// rereads user memory: see seccomp_unotify(2)).
func (l *Listener) Continue(id uint64) error {
	return l.Send(&Resp{ID: id, Flags: FlagContinue})
}

// ReplyZeroConfirmed answers notification id with the return value 0 and
// reports, with a nil error, that the task *took* the answer. A plain
// Send can return 0 and still be discarded by the kernel: a task woken by
// a signal just before the reply was queued restarts its call (or sees
// EINTR) although Send succeeded. This reply instead goes through
// SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SEND|SETFD: the task
// installs srcfd as its fd 0 and takes the answer in its own context,
// which makes the syscall return 0, and the ioctl returns only once it has
// done so, or fails with ESRCH if a signal got there first (nothing was
// delivered and nothing installed).
//
// srcfd must be a duplicate of the task's own fd 0 (pidfd_getfd), so that
// replacing fd 0 changes nothing the task can see except two side effects
// of closing the old reference: POSIX record locks the process held on
// that file are released, and FD_CLOEXEC on fd 0 is cleared.
//
// Errors: IsGone (ENOENT: the notification had already gone, nothing
// delivered; ESRCH: interrupted before the task took it, nothing
// delivered); ErrUnconfirmed (the ioctl itself was interrupted and its
// retry found the answer already queued: delivered unless the task was
// interrupted in the same instant); anything else means the answer was not
// queued and the notification is still pending.
func (l *Listener) ReplyZeroConfirmed(id uint64, srcfd int) error {
	a := AddFD{ID: id, Flags: unix.SECCOMP_ADDFD_FLAG_SETFD | unix.SECCOMP_ADDFD_FLAG_SEND, Srcfd: uint32(srcfd), Newfd: 0}
	// The ioctl waits for the task. If a signal (the Go runtime's
	// SIGURG) interrupted that wait, the kernel would withdraw the fd
	// but leave the answer queued, and the automatic restart of the
	// ioctl would fail with ENOENT once the task had taken the answer:
	// indistinguishable from "gone before". Signals are blocked on this
	// thread for the duration, so ENOENT and ESRCH always mean that
	// nothing was delivered.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old); err != nil {
		return fmt.Errorf("pthread_sigmask: %w", err)
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	err := l.ioctlRaw(unix.SECCOMP_IOCTL_NOTIF_ADDFD, func(fd uintptr) unix.Errno {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(unix.SECCOMP_IOCTL_NOTIF_ADDFD), uintptr(unsafe.Pointer(&a)))
		return errno
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("SECCOMP_IOCTL_NOTIF_ADDFD: %w (%w)", err, unix.ENOENT)
	case errors.Is(err, unix.EINPROGRESS):
		return ErrUnconfirmed
	}
	return fmt.Errorf("SECCOMP_IOCTL_NOTIF_ADDFD: %w", err)
}

// ErrUnconfirmed: see ReplyZeroConfirmed.
var ErrUnconfirmed = errors.New("seccompnotify: reply queued, delivery unconfirmed")

// IDValid reports, with a nil error, that notification id is still
// pending: the task that raised it is still waiting, so its pid still
// names it. Use it after binding to the task (opening its pidfd or
// /proc/<pid>/mem, reading its memory) and before acting on what was
// learnt. An error satisfying IsGone means the notification is gone.
func (l *Listener) IDValid(id uint64) error {
	if err := l.ioctl(unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)); err != nil {
		return fmt.Errorf("SECCOMP_IOCTL_NOTIF_ID_VALID: %w", err)
	}
	return nil
}

// SetSyncWakeUp sets SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (Linux 6.6+): the
// kernel then wakes the supervisor and the task on the current CPU, which
// halves the round trip when supervisor and task ping-pong. It returns an
// error on kernels without the flag; the listener works either way.
func (l *Listener) SetSyncWakeUp() error {
	err := l.ioctlVal(unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
	if err != nil {
		return fmt.Errorf("SECCOMP_IOCTL_NOTIF_SET_FLAGS(SYNC_WAKE_UP): %w", err)
	}
	l.syncWakeUp = true
	return nil
}

// SyncWakeUp reports whether SetSyncWakeUp succeeded.
func (l *Listener) SyncWakeUp() bool { return l.syncWakeUp }

// Hungup reports whether the filter has no users left (every task that
// had it has exited): poll(2) says POLLHUP. A RECV then fails with ENOENT
// at once.
func (l *Listener) Hungup() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return true
	}
	fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
}

// IsGone reports whether err means that the notification or its task is
// gone (ENOENT from RECV, SEND or ID_VALID), as opposed to a failure of
// the listener.
func IsGone(err error) bool { return errors.Is(err, unix.ENOENT) }

// Serve receives notifications until the filter has no users left (every
// task that had it has exited: POLLHUP), ctx is cancelled, or the
// listener fails. It calls h for each notification, on Serve's goroutine
// and one at a time, with a Notif that h may keep; h must not block (hand
// blocking work to another goroutine). Serve returns nil when the filter
// has no users, ctx.Err() when cancelled. It does not close l.
//
// Serve waits in poll(2) on the listener and an eventfd that ctx's
// cancellation writes, on one OS thread, then RECVs: with a single
// receiver, POLLIN guarantees that RECV does not block (a notification
// cancelled in between makes RECV fail with ENOENT instead).
func (l *Listener) Serve(ctx context.Context, h func(*Notif)) error {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	defer unix.Close(efd)
	stop := context.AfterFunc(ctx, func() {
		var one = [8]byte{1}
		_, _ = unix.Write(efd, one[:])
	})
	defer stop()

	l.mu.RLock()
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}, {Fd: int32(efd), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("poll seccomp listener: %w", err)
		}
		if fds[1].Revents != 0 {
			return ctx.Err()
		}
		re := fds[0].Revents
		if re&unix.POLLNVAL != 0 {
			return ErrClosed
		}
		if re&unix.POLLIN != 0 {
			n := new(Notif)
			if err := l.Recv(n); err != nil {
				if IsGone(err) {
					continue
				}
				return err
			}
			h(n)
			continue
		}
		if re&(unix.POLLHUP|unix.POLLERR) != 0 {
			return nil
		}
	}
}
