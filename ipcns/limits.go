package ipcns

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// Compile-time limits of Linux's SysV IPC (include/uapi/linux/sem.h,
// ipc/util.h): they are not sysctls.
const (
	IPCMNI      = 32768 // ids per kind: idx is id & (IPCMNI-1)
	idxShift    = 15    // id = seq<<idxShift | idx
	seqMax      = 0xffff
	SemVMX      = 32767 // largest semaphore value
	SemAEM      = 32767 // largest semadj magnitude
	SemUME      = 500   // seminfo.semume (SEMOPM)
	SemUSZ      = 20    // seminfo.semusz for IPC_INFO
	SemMNU      = 1024000000
	SemMAP      = 1024000000
	minIdxCycle = 64 // ipc_min_cycle: RADIX_TREE_MAP_SIZE
)

// Limits are a namespace's tunable limits, the values of kernel.sem
// ("SEMMSL SEMMNS SEMOPM SEMMNI"), kernel.msgmax, kernel.msgmnb and
// kernel.msgmni.
type Limits struct {
	SemMSL int // semaphores per set
	SemMNS int // semaphores in the namespace
	SemOPM int // operations per semop call
	SemMNI int // semaphore sets
	MsgMax int // bytes per message
	MsgMNB int // default bytes per queue
	MsgMNI int // message queues
}

// DefaultLimits are Linux's defaults.
func DefaultLimits() Limits {
	return Limits{
		SemMSL: 32000, SemMNS: 1024000000, SemOPM: 500, SemMNI: 32000,
		MsgMax: 8192, MsgMNB: 16384, MsgMNI: 32000,
	}
}

// SetSem sets the semaphore limits from a kernel.sem value such as
// "32000 1024000000 500 32000". Linux refuses a semmni above IPCMNI and
// negative values with EINVAL; so does SetSem, with an error.
func (l *Limits) SetSem(value string) error {
	f := strings.Fields(value)
	if len(f) != 4 {
		return fmt.Errorf("kernel.sem %q: want 4 numbers", value)
	}
	var v [4]int
	for i, s := range f {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("kernel.sem %q: %q is not a non-negative number", value, s)
		}
		v[i] = n
	}
	if v[3] > IPCMNI {
		return fmt.Errorf("kernel.sem %q: semmni above %d", value, IPCMNI)
	}
	l.SemMSL, l.SemMNS, l.SemOPM, l.SemMNI = v[0], v[1], v[2], v[3]
	return nil
}

// SemString formats the semaphore limits as kernel.sem reads.
func (l Limits) SemString() string {
	return fmt.Sprintf("%d\t%d\t%d\t%d", l.SemMSL, l.SemMNS, l.SemOPM, l.SemMNI)
}

// Resources is what the semaphore and message-queue engines of one IPC
// namespace share: its limits (the kernel.sem and kernel.msg* sysctls) and
// the account its objects' memory is charged to. The engines keep their
// objects in their own per-namespace state, created with a Resources.
type Resources struct {
	// Name identifies the namespace in logs and host tools.
	Name   string
	limits atomic.Pointer[Limits]
	charge charge // account.go
}

// NewResources returns the resources of a namespace with the given limits.
func NewResources(name string, l Limits) *Resources {
	ns := &Resources{Name: name}
	ns.limits.Store(&l)
	return ns
}

// Limits returns the namespace's current limits. Like the kernel's sc_*
// fields they are read without a lock; a change applies to calls that
// start after it.
func (ns *Resources) Limits() *Limits { return ns.limits.Load() }

// SetLimits replaces the namespace's limits.
func (ns *Resources) SetLimits(l Limits) { ns.limits.Store(&l) }
