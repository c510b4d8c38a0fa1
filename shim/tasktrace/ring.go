package tasktrace

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is the consumer side of a BPF ring buffer map (kernel/bpf/ringbuf.c),
// read through its mapped pages: the consumer position page (read-write),
// the producer position page and the data pages, which the kernel maps
// twice in a row so that a record never wraps.
type ring struct {
	cons []byte // consumer page
	prod []byte // producer page followed by the data, twice
	data []byte // prod[pageSize:]
	mask uint64
	// f wraps the map fd for Go's netpoller (Wait); the fd stays owned by
	// the map.
	f *os.File
}

const (
	ringHdrLen  = 8
	ringBusyBit = 1 << 31
	ringDiscard = 1 << 30
)

func openRing(fd, size int) (*ring, error) {
	page := os.Getpagesize()
	cons, err := unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap ring consumer page: %w", err)
	}
	prod, err := unix.Mmap(fd, int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(cons)
		return nil, fmt.Errorf("mmap ring data: %w", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Munmap(cons)
		unix.Munmap(prod)
		return nil, fmt.Errorf("dup ring fd: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		unix.Munmap(cons)
		unix.Munmap(prod)
		return nil, err
	}
	return &ring{cons: cons, prod: prod, data: prod[page:], mask: uint64(size - 1),
		f: os.NewFile(uintptr(dup), "bpf-ringbuf")}, nil
}

func (r *ring) consPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.cons[0])) }
func (r *ring) prodPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.prod[0])) }

// pending reports whether records (committed or not) follow the consumer
// position.
func (r *ring) pending() bool {
	return atomic.LoadUint64(r.prodPos()) != atomic.LoadUint64(r.consPos())
}

// errBusy: the next record is reserved but not yet committed.
var errBusy = errors.New("tasktrace: record not committed yet")

// next calls f with the next committed record and consumes it. It returns
// false when there is none; errBusy when the next one is being written
// (the writer is a BPF program that does not sleep: retry).
func (r *ring) next(f func(rec []byte)) (bool, error) {
	for {
		cons := atomic.LoadUint64(r.consPos())
		prod := atomic.LoadUint64(r.prodPos())
		if cons == prod {
			return false, nil
		}
		// The header's length word is written last by the kernel (an
		// xchg clearing the busy bit), so loading it atomically orders
		// the record's bytes before our reads of them.
		hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[cons&r.mask])))
		if hdr&ringBusyBit != 0 {
			return false, errBusy
		}
		n := uint64(hdr &^ (ringBusyBit | ringDiscard))
		start := (cons + ringHdrLen) & r.mask
		end := cons + ringHdrLen + (n+7)&^7
		if hdr&ringDiscard == 0 {
			f(r.data[start : start+n])
		}
		atomic.StoreUint64(r.consPos(), end)
		if hdr&ringDiscard == 0 {
			return true, nil
		}
	}
}

func (r *ring) close() {
	r.f.Close()
	unix.Munmap(r.cons)
	unix.Munmap(r.prod)
}
