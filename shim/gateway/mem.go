package gateway

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxCopy bounds one copy from or to a caller (the largest legitimate one
// is SETALL/GETALL of SEMMSL semaphores, 64000 bytes, or a msgmax
// message); larger requests fail with the errno the handler chooses
// before copying.
const MaxCopy = 1 << 22

// ReadMem copies len(b) bytes at addr in t's memory into b. Any failure
// (unmapped memory, a dead task) is EFAULT, as a kernel copy_from_user
// would report.
//
// The copy goes through /proc/<tid>/mem, opened once per Task: the fd is
// bound to the task's address space when opened, so it cannot reach
// another process if the tid is reused. After an exec the old address
// space is gone and reads fail; the fd is then reopened once.
func (t *Task) ReadMem(addr uint64, b []byte) error {
	return t.memIO(addr, b, false)
}

// WriteMem copies b to addr in t's memory; failures are EFAULT.
func (t *Task) WriteMem(addr uint64, b []byte) error {
	return t.memIO(addr, b, true)
}

func (t *Task) memIO(addr uint64, b []byte, write bool) error {
	if len(b) == 0 {
		return nil
	}
	if len(b) > MaxCopy || addr+uint64(len(b)) < addr || int64(addr) < 0 {
		return unix.EFAULT
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for attempt := 0; attempt < 2; attempt++ {
		if t.memfd < 0 {
			if t.pidfd < 0 {
				return unix.EFAULT
			}
			fd, err := unix.Open("/proc/"+strconv.Itoa(t.Tid)+"/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return unix.EFAULT
			}
			t.memfd = fd
		}
		var n int
		var err error
		if write {
			n, err = unix.Pwrite(t.memfd, b, int64(addr))
		} else {
			n, err = unix.Pread(t.memfd, b, int64(addr))
		}
		if err == nil && n == len(b) {
			return nil
		}
		if n == 0 && err == nil && attempt == 0 {
			// EOF: the address space the fd was bound to is gone
			// (exec); bind to the current one.
			unix.Close(t.memfd)
			t.memfd = -1
			continue
		}
		return unix.EFAULT
	}
	return unix.EFAULT
}
