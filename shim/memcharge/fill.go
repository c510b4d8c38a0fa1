package memcharge

import (
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// How a helper allocates pages.
//
// fallocate(2) on a memfd is the cheapest way, but where the host enables
// transparent huge pages for shmem (shmem_enabled "always" or
// "within_size", globally or for an mTHP size), it allocates huge folios:
// measured on Linux 6.18 with shmem_enabled=always, a 256 KiB fallocate
// took a 2 MiB folio. The pod would be charged up to 512 times a small
// message's page, and a punched page inside a huge folio is not given
// back until the folio is split. The kernel's own IPC objects are
// kmalloc'd: base pages at most.
//
// So on such hosts the helper allocates through a mapping that refuses
// huge pages (MADV_NOHUGEPAGE, then MADV_POPULATE_WRITE: base pages,
// charged to the helper's memory cgroup, the pod's, as a fault of its
// own). Unlike fallocate, a fill by pages that fails (ENOMEM at the pod's
// limit) keeps what it allocated: the shim trims it (Ballast.fillLocked,
// and the arena's punch of a block's former holes). The kernel honours
// MADV_NOHUGEPAGE also with shmem_enabled "force" (measured on 6.18: a
// 4 KiB populate took 4 KiB, a fallocate 2 MiB). The per-size knobs
// (hugepages-*/shmem_enabled) govern anonymous shared mappings only
// (mm/shmem.c, shmem_allowable_huge_orders: a memfd gets the global
// orders); reading them can only choose pages where fallocate would have
// done, which costs nothing but speed.
//
// A fill by pages maps at most fillPiece bytes at a time: mapped shmem
// pages count in the helper's OOM badness (shmem-rss), and the helper
// must stay the pod OOM killer's last choice (helper.go).

// fillEnv tells a helper to allocate by pages (fillByPages) when "1".
const fillEnv = "CONTAINERD_SHIM_IPC_MEMCHARGE_PAGES"

// FillModeEnv overrides the choice for tests and for hosts where it is
// wrong: "pages" or "fallocate"; empty or anything else lets the host's
// THP settings decide (fillByPagesHere).
const FillModeEnv = "IPC_SHIM_MEMCHARGE_FILL"

// fillByPages reports whether helpers started now should allocate by
// pages.
func fillByPages() bool {
	switch os.Getenv(FillModeEnv) {
	case "pages":
		return true
	case "fallocate":
		return false
	}
	return fillByPagesHere()
}

// fillByPagesHere reports whether this host's THP settings may give a
// memfd huge folios (read once).
var fillByPagesHere = sync.OnceValue(func() bool {
	return shmemHugeMayApply("/sys/kernel/mm/transparent_hugepage")
})

// shmemHugeMayApply reads the THP settings under dir (sysfs): whether a
// fallocate on a memfd may allocate huge folios.
func shmemHugeMayApply(dir string) bool {
	global := thpSetting(dir + "/shmem_enabled")
	switch global {
	case "always", "within_size", "force":
		return true
	}
	sizes, _ := os.ReadDir(dir)
	for _, s := range sizes {
		if !strings.HasPrefix(s.Name(), "hugepages-") {
			continue
		}
		switch thpSetting(dir + "/" + s.Name() + "/shmem_enabled") {
		case "always", "within_size":
			return true
		case "inherit":
			if global == "always" || global == "within_size" {
				return true
			}
		}
	}
	return false
}

// thpSetting returns the bracketed choice of a THP sysfs file ("always
// within_size advise [never] deny force" → "never"), or "".
func thpSetting(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return ""
	}
	return s[i+1 : j]
}

// allocate gives fd's pages [off, off+length), in the helper: by
// fallocate, or by pages (see above). It returns fallocate's errno on
// failure, EINTR retried.
func allocate(fd int, off, length int64, byPages bool) error {
	if byPages {
		return allocatePages(fd, off, length)
	}
	for {
		err := unix.Fallocate(fd, 0, off, length)
		if err != unix.EINTR {
			return err
		}
	}
}

// fillPiece is the most a fill by pages maps at once.
const fillPiece = blockSize

// allocatePages allocates fd's pages [off, off+length) as base pages
// through mappings of its own, growing the file first if it ends before
// (the ballast grows by its fills, as by fallocate's). off and length are
// multiples of the page size.
func allocatePages(fd int, off, length int64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Size < off+length {
		if err := unix.Ftruncate(fd, off+length); err != nil {
			return err
		}
	}
	for done := int64(0); done < length; {
		n := min(length-done, fillPiece)
		err := populate(fd, off+done, n)
		if err == unix.EINVAL {
			// A kernel before 5.14: no MADV_POPULATE_WRITE. Touching
			// the pages instead would make the pod's limit a fault
			// the helper cannot fail; fallocate's huge folios are
			// the lesser harm.
			return allocate(fd, off+done, length-done, false)
		}
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// populate allocates the pages [off, off+n) of fd through a mapping that
// refuses huge pages, unmapped before it returns.
func populate(fd int, off, n int64) error {
	mem, err := unix.Mmap(fd, off, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	// EINVAL: a kernel without THP, where no huge folio can be had.
	if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil && err != unix.EINVAL {
		return err
	}
	for {
		err = unix.Madvise(mem, unix.MADV_POPULATE_WRITE)
		switch err {
		case unix.EINTR:
			continue
		case unix.EFAULT:
			// shmem's fault turns its ENOSPC (the commit limit under
			// vm.overcommit_memory=2, as fallocate reports it) into
			// SIGBUS, which MADV_POPULATE_WRITE reports as EFAULT: the
			// shim refuses the charge on ENOSPC, as after fallocate.
			return unix.ENOSPC
		}
		return err
	}
}
