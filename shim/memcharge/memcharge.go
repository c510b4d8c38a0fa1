// Package memcharge makes the memory an engine namespace's objects hold
// count in the memory cgroup of the pod that owns the namespace.
//
// Linux charges sem_array, sem_undo and msg_msg to the memory cgroup of
// the task that allocates them (GFP_KERNEL_ACCOUNT): a container that
// fills queues is refused, or OOM-killed, within its own limit. The
// engines live in the shim, which runs in containerd's cgroup, so their
// bytes would escape the pod. A Ballast puts the same number of bytes,
// rounded up to a granule, into the pod's cgroup: a memfd held by the
// shim, grown by a helper process (the shim's own binary, see HelperMain)
// that sits in the pod's cgroup. Memory cgroups charge a shmem page to the
// cgroup of the process that allocates it (mm/memcontrol.c:
// get_mem_cgroup_from_mm of current), and the page stays charged there
// while the file holds it — also after the helper exits, as a kernel IPC
// object stays charged after its creator exits. Shrinking is a truncate
// by the shim, which uncharges wherever the pages were charged.
//
// So the pod's memory.current (memory.usage_in_bytes on cgroup v1) counts
// what its namespace holds in the shim, within one granule and a slack
// granule (message text: see arena.go for what its pages add), and when the pod is at its limit the helper's fallocate does
// what the kernel's allocation would: memory reclaim in the pod, the
// pod's OOM killer choosing among the pod's processes (the helper has
// oom_score_adj -1000), and ENOMEM when nothing can be freed — which the
// engines answer as Linux does (ipcns.ErrNoMemory).
//
// Message text is not matched by the ballast but held in it: a second
// file whose pages only the helper allocates, mapped into the shim
// (arena.go, Ballast.AllocText), so the host holds a pod's messages once.
//
// The helper is a process in the pod's cgroup: it must leave before the
// cgroup is removed (Evict, called before runc deletes the container
// hosting it); the next growth starts a helper in the cgroup of another
// container of the namespace.
//
// On cgroup v1 the helper joins the memory hierarchy only. On v2 there is
// one hierarchy, and the helper is in the container's cgroup for every
// controller: it is frozen with it (settle passes frozen cgroups over), its
// threads count in the pod's pids.max (helper.otherDeath), runc ps lists it
// and runc kill --all (cgroup.kill) kills it; and a cgroup with
// controllers enabled for its children takes no process (settle).
package memcharge

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// retryAfter is how long a ballast that could not start or keep a helper
// counts charges without backing them before it tries again.
const retryAfter = 10 * time.Second

// Granule is the unit in which a Ballast grows and shrinks: a charge is
// one helper round trip (tens of µs) per Granule of objects, not per
// message.
const Granule = 256 << 10

// Host says where a Ballast's helper may go, in order of preference: the
// first Place that takes it (startHelper) gets it.
type Host func() ([]Place, error)

// Place is a memory cgroup a helper may go to: a member container's.
type Place struct {
	// Container is the container's id, for Evict ("" for none).
	Container string
	// Procs is the cgroup.procs file of the container's memory cgroup
	// (MemoryCgroup of one of its processes when it was recorded).
	Procs string
	// Pid, if not 0, is the process Procs was read from. On cgroup v2 a
	// container may have made cgroups below its own and given them
	// controllers since (systemd as a container's init does), and its
	// own then takes no process (the no-internal-process rule): the
	// helper goes where Pid is now, if that is below Procs's cgroup.
	Pid int
}

// Ballast is an ipcns.Account whose charges are real pages in the pod's
// memory cgroup.
type Ballast struct {
	host Host
	logf func(format string, args ...any)

	// mu protects the fields below; it is held across a helper round trip
	// (the namespace's charges wait for it, as the kernel's allocation
	// waits for reclaim).
	mu      sync.Mutex
	memfd   int   // the ballast's pages; -1 once closed
	size    int64 // bytes allocated in memfd
	charged int64 // bytes the namespace holds
	helper  *helper
	// text holds message text (arena.go); nil if it could not be made.
	text *arena
	// unbackedUntil is set when no helper could be started or kept:
	// until then charges are counted but not backed; the next growth
	// after it tries again (and backs everything charged by then).
	unbackedUntil time.Time
}

// New returns a Ballast whose helpers go where host says. logf reports
// helper failures; nil discards them.
func New(name string, host Host, logf func(format string, args ...any)) (*Ballast, error) {
	fd, err := unix.MemfdCreate("ipc-ballast:"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	b := &Ballast{host: host, logf: logf, memfd: fd}
	if b.text, err = newArena(name); err != nil {
		logf("memcharge: message text of %s kept in the shim's heap: %v", name, err)
	}
	return b, nil
}

// Charge adds n bytes; it fails with ipcns.ErrNoMemory if the pod's
// memory cgroup cannot hold them.
func (b *Ballast) Charge(n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	want := b.charged + n
	if want > b.size && b.memfd >= 0 && !time.Now().Before(b.unbackedUntil) {
		if err := b.growLocked(roundUp(want) + Granule); err != nil {
			return err
		}
	}
	b.charged = want
	return nil
}

// Uncharge gives n bytes back; the ballast shrinks once it holds more
// than three granules beyond the charge.
func (b *Ballast) Uncharge(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.charged -= n
	if b.memfd >= 0 && b.size-b.charged > 3*Granule {
		size := roundUp(b.charged) + Granule
		if err := unix.Ftruncate(b.memfd, size); err != nil {
			b.logf("memcharge: shrink the ballast to %d bytes: %v", size, err)
			return
		}
		b.size = size
	}
}

// growLocked makes the ballast size bytes, allocated in the pod's cgroup
// (or counted only, if no helper can be had).
func (b *Ballast) growLocked(size int64) error {
	backed, err := b.fillLocked(fileBallast, b.size, size-b.size)
	if err == nil && backed {
		b.size = size
	}
	return err
}

// fillLocked has a helper in the pod's cgroup allocate the pages
// [off, off+length) of one of the ballast's files. It reports whether the
// pages are the pod's: false, with no error, when no helper could be had
// (the charge is then counted, not backed, for retryAfter).
//
// A helper that is gone (killed with its container's processes, evicted)
// or dies allocating is replaced once: if the second one dies allocating
// too, it was the pod's OOM killer's last choice or its runtime found no
// memory, and the charge is refused (ipcns.ErrNoMemory), as is one that
// the pod's cgroup cannot hold. One known to have ended for another
// reason (helper.otherDeath) leaves the charge unbacked.
func (b *Ballast) fillLocked(file int, off, length int64) (bool, error) {
	for attempt := 0; ; attempt++ {
		if b.helper == nil {
			h, err := startHelper(b.memfd, b.textFD(), b.host)
			if err != nil {
				b.logf("memcharge: no helper in the pod's memory cgroup (%v): the namespace's objects are counted, not charged to the pod, for %v", err, retryAfter)
				b.unbackedUntil = time.Now().Add(retryAfter)
				return false, nil
			}
			b.helper = h
		}
		err := b.helper.allocate(file, off, length)
		if err == nil {
			return true, nil
		}
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ENOSPC) {
			// The pod's cgroup is full and its OOM killer freed nothing.
			// fallocate undid its partial allocation; a fill by pages
			// did not (fill.go).
			b.trimLocked(file, off, length)
			return false, ipcns.ErrNoMemory
		}
		// Gone or stuck: reaped first (a stuck fallocate would hold the
		// truncate), then what it may have allocated is trimmed.
		h := b.helper
		h.stop()
		b.helper = nil
		b.trimLocked(file, off, length)
		if attempt == 0 {
			continue
		}
		if errors.Is(err, errDiedAllocating) && !h.otherDeath() {
			return false, ipcns.ErrNoMemory
		}
		// Stuck twice (errHelperStuck: a machine too loaded to start a
		// helper in time; a cgroup frozen after its helper came is not
		// chosen again, see settle) or another failure: nothing says
		// the pod is out of memory.
		b.logf("memcharge: helper failed twice (%v; %s): the namespace's objects are counted, not charged to the pod, for %v", err, h.end(), retryAfter)
		b.unbackedUntil = time.Now().Add(retryAfter)
		return false, nil
	}
}

// trimLocked frees what a helper that failed may have allocated of
// [off, off+length). For the text file that is the arena's to do (the
// range may hold live texts beside the holes it asked to fill): it
// punches the former holes when the fill fails for good.
func (b *Ballast) trimLocked(file int, off, length int64) {
	if file == fileBallast {
		_ = unix.Ftruncate(b.memfd, b.size)
	}
}

// textFD returns the arena's file, or -1.
func (b *Ballast) textFD() int {
	if b.text == nil {
		return -1
	}
	return b.text.fd
}

// Evict stops the helper if it sits in container's cgroup: call it before
// that cgroup is removed. The pages it allocated stay charged there.
func (b *Ballast) Evict(container string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.helper != nil && b.helper.container == container {
		b.helper.stop()
		b.helper = nil
	}
}

// Close stops the helper and frees the ballast.
func (b *Ballast) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.helper != nil {
		b.helper.stop()
		b.helper = nil
	}
	if b.memfd < 0 {
		return nil
	}
	if b.text != nil {
		b.text.close()
	}
	err := unix.Close(b.memfd)
	b.memfd, b.size = -1, 0
	return err
}

// Usage reports the bytes the namespace holds and the bytes the ballast
// holds in the pod's cgroup, message text included.
func (b *Ballast) Usage() (charged, held int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	charged, held = b.charged, b.size
	if b.text != nil {
		charged += b.text.inuse
		held += b.text.filled
	}
	return charged, held
}

// TextUsage reports the bytes of message text the ballast holds and the
// bytes of its text pages in the pod's cgroup.
func (b *Ballast) TextUsage() (texts, held int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.text == nil {
		return 0, 0
	}
	return b.text.inuse, b.text.filled
}

// Backed reports whether charges reach the pod's cgroup (false once no
// helper could be started).
func (b *Ballast) Backed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !time.Now().Before(b.unbackedUntil)
}

func roundUp(n int64) int64 { return (n + Granule - 1) / Granule * Granule }

// exe is the binary started as a helper: the running shim's own, even
// if its file was replaced or removed since (an upgrade in place).
var exe = func() string { return "/proc/self/exe" }
