package tasktrace

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Kind says what an Event reports.
type Kind uint8

const (
	// Deliver: thread Tid takes signal Sig (signal_deliver): Handler and
	// Flags are the signal's action, Regs the thread's user registers,
	// which still hold the outcome of the system call it was in.
	Deliver Kind = kindDeliver
	// Generate: signal Sig was queued for thread Tid, or for its whole
	// thread group when Group is set (signal_generate).
	Generate Kind = kindGenerate
	// Exit: thread Tid begins to exit (sched_process_exit); GroupDead
	// when it is the last of its thread group.
	Exit Kind = kindExit
	// Exec: thread Tid, formerly OldTid, completed an execve
	// (sched_process_exec): its credentials and, when OldTid differs,
	// its tid changed.
	Exec Kind = kindExec
)

func (k Kind) String() string {
	switch k {
	case Deliver:
		return "deliver"
	case Generate:
		return "generate"
	case Exit:
		return "exit"
	case Exec:
		return "exec"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Sigaction handler values.
const (
	SigDfl = 0
	SigIgn = 1
)

// SA_RESTART (asm-generic/signal.h, x86).
const SaRestart = 0x10000000

// ERESTARTSYS is the kernel's internal errno that seccomp leaves in a
// thread's ax when its wait for the supervisor was interrupted
// (include/linux/errno.h).
const ERESTARTSYS = 512

// Event is one record from the kernel. Thread and process ids are those
// of the initial pid namespace (task->pid), which is the shim's.
type Event struct {
	Kind      Kind
	Tid, Tgid int32
	Sig       int32
	// Handler and Flags (Deliver) are the action's sa_handler (SigDfl,
	// SigIgn or an address) and sa_flags.
	Handler, Flags uint64
	Group          bool // Generate
	// Queued (Generate) is when the signal was queued, in CLOCK_MONOTONIC
	// nanoseconds (bpf_ktime_get_ns), read just after the target was
	// woken: a wait the signal ended had ended before Queued, give or
	// take the few instructions between.
	Queued    int64
	GroupDead bool  // Exit
	OldTid    int32 // Exec
	Regs      Regs  // Deliver
}

// HasHandler reports whether a Deliver event runs a handler (rather than
// a default action or nothing).
func (e *Event) HasHandler() bool { return e.Handler != SigDfl && e.Handler != SigIgn }

// Regs are the x86_64 user registers of a thread as saved at its system
// call entry, with ax holding the call's result once it has one.
type Regs struct {
	Ax, OrigAx, IP                      uint64
	Di, Si, Dx, R10, R8, R9, Bx, Cx, Bp uint64
}

// Interrupted reports whether the thread's system call returned
// -ERESTARTSYS: for a call trapped by seccomp user notification, its wait
// for the supervisor was interrupted (with no answer taken).
func (r *Regs) Interrupted() bool { return int64(r.Ax) == -ERESTARTSYS }

// Args returns the six argument registers of the system call, in the
// 64-bit calling convention, or the i386 one when compat32.
func (r *Regs) Args(compat32 bool) [6]uint64 {
	if compat32 {
		m := func(v uint64) uint64 { return v & 0xffffffff }
		return [6]uint64{m(r.Bx), m(r.Cx), m(r.Dx), m(r.Si), m(r.Di), m(r.Bp)}
	}
	return [6]uint64{r.Di, r.Si, r.Dx, r.R10, r.R8, r.R9}
}

// Tracer loads and attaches the programs and reads their events.
type Tracer struct {
	watched, events, lost *ebpf.Map
	lostTgids             *ebpf.Map // thread groups whose signal events were dropped
	progs                 []*ebpf.Program
	links                 []link.Link
	ring                  *ring
	lostMem               []byte // lost's mapped value
	info                  LoadInfo

	// closeMu is held for reading while the ring or lostMem is read, and
	// for writing by Close, which unmaps them: a late reader (a deferred
	// answer of a gateway being shut down) finds nothing instead of a
	// fault.
	closeMu sync.RWMutex
	// closed is set by Close; lostAtClose is Lost's last value. Guarded by
	// closeMu.
	closed      bool
	lostAtClose Losses
}

// Losses counts the events the kernel could not record, by class.
type Losses struct {
	// Signals counts Deliver and Generate events dropped: the ring was
	// full but for the room kept for exits and execs. The thread group
	// each was about is kept for TakeLostSignals, except for Unplaced of
	// them (more than lostTgidsMax thread groups between two takes).
	Signals, Unplaced uint64
	// Lifecycle counts Exit and Exec events dropped: the ring was full.
	Lifecycle uint64
}

// Total grows whenever any count does (Unplaced losses are in Signals
// too): it tells that something was lost since.
func (l Losses) Total() uint64 { return l.Signals + l.Unplaced + l.Lifecycle }

// ringSize is the ring's data size: 1 MiB holds ~5,900 records, several
// seconds of a signal storm while the reader is delayed.
const ringSize = 1 << 20

// lifecycleRoom is the part of the ring that only exits and execs may
// fill (~1,480 records): a thread that signals itself without pause fills
// the rest, and its signal events are then dropped, but an exit (which
// the gateway needs to apply SEM_UNDO and free what the process held) is
// dropped only when that many exits and execs come before the reader.
const lifecycleRoom = ringSize / 4

// DefaultCacheDir is where New keeps what it learned from the kernel's
// BTF (cache.go): the shim's run directory, root's only, on tmpfs.
const DefaultCacheDir = "/run/containerd-shim-ipc"

// Options tune NewWithOptions.
type Options struct {
	// CacheDir holds the kernel facts (structure offsets, attach targets)
	// that the first Tracer since boot learned from the kernel's BTF, so
	// that the next ones need not parse it; "" parses every time.
	CacheDir string
}

// LoadInfo says how a Tracer was made.
type LoadInfo struct {
	// Cached: the kernel facts came from the cache (no BTF parse).
	Cached bool
	// CacheErr is why the cache was not read or written, if it was not
	// (a missing file, the first time after boot, included).
	CacheErr error
	// Duration is New's wall time.
	Duration time.Duration
}

// New loads the programs and attaches them, keeping what it learns from
// the kernel's BTF in DefaultCacheDir. It needs CAP_BPF and CAP_PERFMON
// (or CAP_SYS_ADMIN) and a kernel with BTF (Linux 5.11+ with
// CONFIG_DEBUG_INFO_BTF); it only runs on x86_64.
func New() (*Tracer, error) { return NewWithOptions(Options{CacheDir: DefaultCacheDir}) }

// NewWithOptions is New with options.
//
// The kernel facts come from o.CacheDir when a file there is for this
// boot, kernel and build, intact (checksum), root's and no one else's;
// otherwise, or when the kernel refuses the programs built from them or
// attaches one to another tracepoint than asked, they come from parsing
// the kernel's BTF, and the file is written anew.
func NewWithOptions(o Options) (*Tracer, error) {
	t0 := time.Now()
	var info LoadInfo
	var key cacheKey
	keyErr := errors.New("no cache directory")
	if o.CacheDir != "" {
		key, keyErr = currentKey()
		info.CacheErr = keyErr
		if keyErr == nil {
			facts, err := readCache(o.CacheDir, key)
			if err == nil {
				t, err := newTracer(facts)
				if err == nil {
					t.info = LoadInfo{Cached: true, Duration: time.Since(t0)}
					return t, nil
				}
				// The kernel contradicted the file: forget it.
				removeCache(o.CacheDir, key)
			}
			info.CacheErr = err
		}
	}
	facts, err := parseFacts()
	if err != nil {
		return nil, err
	}
	t, err := newTracer(facts)
	if err != nil {
		return nil, err
	}
	if keyErr == nil {
		if err := writeCache(o.CacheDir, key, facts); err != nil {
			info.CacheErr = fmt.Errorf("write the kernel facts cache: %w", err)
		}
	}
	info.Duration = time.Since(t0)
	t.info = info
	return t, nil
}

// LoadInfo says how the Tracer was made.
func (t *Tracer) LoadInfo() LoadInfo { return t.info }

// newTracer makes the maps, loads the programs with the kernel facts f
// and attaches them, checking that the kernel attached each where asked.
func newTracer(f *kernelFacts) (*Tracer, error) {
	var err error
	l := &f.Layout
	t := &Tracer{}
	fail := func(err error) (*Tracer, error) {
		t.Close()
		return nil, err
	}
	if t.watched, err = ebpf.NewMap(&ebpf.MapSpec{Name: "ipc_watched", Type: ebpf.Hash, KeySize: 4, ValueSize: 1, MaxEntries: 4096}); err != nil {
		return fail(fmt.Errorf("create watched map: %w", err))
	}
	if t.events, err = ebpf.NewMap(&ebpf.MapSpec{Name: "ipc_events", Type: ebpf.RingBuf, MaxEntries: ringSize}); err != nil {
		return fail(fmt.Errorf("create ring buffer: %w", err))
	}
	if t.lost, err = ebpf.NewMap(&ebpf.MapSpec{Name: "ipc_lost", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: lostSlots,
		Flags: unix.BPF_F_MMAPABLE}); err != nil {
		return fail(fmt.Errorf("create lost counter: %w", err))
	}
	if t.lostTgids, err = ebpf.NewMap(&ebpf.MapSpec{Name: "ipc_lost_tgids", Type: ebpf.Hash, KeySize: 4, ValueSize: 1,
		MaxEntries: lostTgidsMax}); err != nil {
		return fail(fmt.Errorf("create lost thread groups map: %w", err))
	}
	if t.lostMem, err = unix.Mmap(t.lost.FD(), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return fail(fmt.Errorf("mmap lost counter: %w", err))
	}
	if t.ring, err = openRing(t.events.FD(), ringSize); err != nil {
		return fail(err)
	}
	m := &maps{watched: t.watched, ring: t.events, lost: t.lost, lostTgids: t.lostTgids}
	specs := []*ebpf.ProgramSpec{
		deliverProgram(l, m),
		generateProgram(l, m),
		exitProgram(l, m),
		execProgram(l, m),
	}
	for _, spec := range specs {
		p, err := loadRawTracepoint(spec, f.Attach[spec.AttachTo])
		if err != nil {
			return fail(err)
		}
		t.progs = append(t.progs, p)
		lk, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return fail(fmt.Errorf("attach %s to %s: %w", spec.Name, spec.AttachTo, err))
		}
		t.links = append(t.links, lk)
		// The kernel attaches a tp_btf program to the tracepoint that
		// its attach id's typedef names: confirm it is the one meant.
		li, err := lk.Info()
		if err != nil {
			return fail(fmt.Errorf("attach %s to %s: link info: %w", spec.Name, spec.AttachTo, err))
		}
		if rt := li.RawTracepoint(); rt == nil || rt.Name != spec.AttachTo {
			got := "?"
			if rt != nil {
				got = rt.Name
			}
			return fail(fmt.Errorf("attach %s to %s: %w (%s)", spec.Name, spec.AttachTo, errWrongTracepoint, got))
		}
	}
	return t, nil
}

// Close detaches the programs and frees the maps. Pending, Lost and
// Drain may still be called: they find nothing new.
func (t *Tracer) Close() {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	if t.lostMem != nil {
		t.lostAtClose = t.lostLocked()
	}
	for _, l := range t.links {
		l.Close()
	}
	for _, p := range t.progs {
		p.Close()
	}
	if t.ring != nil {
		t.ring.close()
	}
	if t.lostMem != nil {
		unix.Munmap(t.lostMem)
	}
	for _, m := range []*ebpf.Map{t.watched, t.events, t.lost, t.lostTgids} {
		if m != nil {
			m.Close()
		}
	}
}

// Watch reports events of the tasks in the IPC namespace with inode ino
// from now on.
func (t *Tracer) Watch(ino uint64) error {
	if ino > 0xffffffff {
		return fmt.Errorf("tasktrace: IPC namespace inode %d does not fit ns.inum", ino)
	}
	return t.watched.Put(uint32(ino), uint8(1))
}

// Unwatch stops reporting the IPC namespace with inode ino.
func (t *Tracer) Unwatch(ino uint64) error {
	err := t.watched.Delete(uint32(ino))
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Pending reports whether events are waiting to be drained: two atomic
// loads, no system call.
func (t *Tracer) Pending() bool {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	return !t.closed && t.ring.pending()
}

// Lost returns how many events the kernel could not record because the
// ring was full, since the Tracer was made. Anything of a class whose
// count grows may have been missed.
func (t *Tracer) Lost() Losses {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return t.lostAtClose
	}
	return t.lostLocked()
}

// lostLocked reads the kernel's counts of lost events (an array's
// mapped values, 8 bytes apart); closeMu is held.
func (t *Tracer) lostLocked() Losses {
	at := func(slot int) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.lostMem[8*slot]))) }
	return Losses{Signals: at(lostSignals), Unplaced: at(lostUnplaced), Lifecycle: at(lostLifecycle)}
}

// TakeLostSignals calls f with each thread group whose signal events were
// dropped since the last take, and forgets them. Read Lost first: a
// thread group is kept before its loss is counted, so every loss that
// count includes was either taken here or is counted again (a later
// loss) before it is taken.
func (t *Tracer) TakeLostSignals(f func(tgid int)) error {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return nil
	}
	// Keys first, then each taken with an atomic lookup-and-delete: a
	// hash map iterated while its keys are deleted may skip some.
	var keys []uint32
	var k uint32
	var v uint8
	it := t.lostTgids.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("tasktrace: read the lost thread groups: %w", err)
	}
	for _, k := range keys {
		if err := t.lostTgids.LookupAndDelete(k, &v); err == nil {
			f(int(k))
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("tasktrace: take lost thread group %d: %w", k, err)
		}
	}
	return nil
}

// Behind reports whether events are waiting to be drained or losses
// beyond total (a Losses.Total the caller has made up for) were counted:
// a few atomic loads, no system call.
func (t *Tracer) Behind(total uint64) bool {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	return !t.closed && (t.ring.pending() || t.lostLocked().Total() != total)
}

// Drain calls f for every event recorded so far, in the order the kernel
// recorded them, and returns how many it read. Each event is consumed
// only after f returns, so a reader that finds nothing Pending knows that
// every event recorded before was applied. A record the kernel is
// still writing (a program running on another CPU right now) is waited
// for: programs do not sleep. Drain must not run concurrently with itself
// or Wait.
func (t *Tracer) Drain(f func(*Event)) int {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return 0
	}
	n := 0
	var ev Event
	for {
		// f runs before the record is consumed: Pending stays true
		// until every event it reports has been applied.
		ok, err := t.ring.next(func(rec []byte) { decode(rec, &ev); f(&ev) })
		if err == errBusy {
			continue
		}
		if !ok {
			return n
		}
		n++
	}
}

// Wait blocks until events are pending or ctx is done (then it returns
// ctx's error).
func (t *Tracer) Wait(ctx context.Context) error {
	if t.Pending() {
		return nil
	}
	rc, err := t.ring.f.SyscallConn()
	if err != nil {
		return err
	}
	t.ring.f.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { t.ring.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	err = rc.Read(func(uintptr) bool { return t.Pending() || ctx.Err() != nil })
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func decode(rec []byte, ev *Event) {
	le := binary.LittleEndian
	*ev = Event{
		Kind: Kind(le.Uint32(rec[offKind:])),
		Tid:  int32(le.Uint32(rec[offTid:])),
		Tgid: int32(le.Uint32(rec[offTgid:])),
		Sig:  int32(le.Uint32(rec[offSig:])),
	}
	a, b := le.Uint64(rec[offA:]), le.Uint64(rec[offB:])
	switch ev.Kind {
	case Deliver:
		ev.Handler, ev.Flags = a, b
		reg := func(off int) uint64 { return le.Uint64(rec[offRegs+off:]) }
		ev.Regs = Regs{Ax: reg(regAx), OrigAx: reg(regOrigAx), IP: reg(regIP),
			Di: reg(regDi), Si: reg(regSi), Dx: reg(regDx), R10: reg(regR10), R8: reg(regR8), R9: reg(regR9),
			Bx: reg(regBx), Cx: reg(regCx), Bp: reg(regBp)}
	case Generate:
		ev.Group = a != 0
		ev.Queued = int64(b)
	case Exit:
		ev.GroupDead = a != 0
	case Exec:
		ev.OldTid = int32(a)
	}
}
