package gateway

import (
	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/abi"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"golang.org/x/sys/unix"
)

// abiArch is the layout of the caller's structures: Decode serves x86_64
// and arm64 only, whose layouts differ in struct semid64_ds.
func (r *Request) abiArch() abi.Arch {
	if r.Notif.Data.Arch == archAArch64 {
		return abi.ARM64
	}
	return abi.AMD64
}

// maxSemidDSSize is the larger struct semid64_ds, x86_64's.
const maxSemidDSSize = max(abi.SizeOfSemidDSAMD64, abi.SizeOfSemidDSGeneric)

// abiPerm is p as struct ipc64_perm.
func abiPerm(p *ipcns.Perm) abi.IPC64Perm {
	return abi.IPC64Perm{Key: p.Key, UID: p.UID, GID: p.GID, CUID: p.CUID, CGID: p.CGID, Mode: uint32(p.Mode), Seq: p.Seq}
}

func (n *Engines) semget(r *Request) {
	key, flg := int32(r.Arg(0)), int(int32(r.Arg(2)))
	if mayCreate(key, flg) && r.Valid() != nil {
		return
	}
	id, err := n.sem.Semget(&r.Task.Caller, key, int(int32(r.Arg(1))), flg)
	r.Reply(int64(id), err)
}

// mayCreate reports whether a semget or msgget with key and flg may make
// an object (IPC_PRIVATE, or IPC_CREAT). Such a call is served only while
// its caller still waits (ID_VALID): natively it cannot be interrupted,
// so an object made for a caller that a signal took away is one it never
// learns of; checking just before narrows that window. A lookup changes
// nothing and is not checked (an ioctl saved on the commonest get).
func mayCreate(key int32, flg int) bool {
	return key == ipcns.IPCPrivate || flg&ipcns.IPCCreat != 0
}

func (n *Engines) semop(r *Request, timed bool) {
	eng := n.sem
	semid, nsops := int32(r.Arg(0)), uint32(r.Arg(2))
	op := &semengine.Op{SemID: semid}
	// Linux's order: the timeout is copied first (EFAULT), then nsops is
	// checked (E2BIG, EINVAL), then the operations are copied (EFAULT),
	// then semid and the rest are checked by the engine.
	if timed && r.Arg(3) != 0 {
		var b [abi.SizeOfTimespec]byte
		if err := r.Task.ReadMem(r.Arg(3), b[:]); err != nil {
			r.Reply(0, err)
			return
		}
		var ts abi.Timespec
		ts.UnmarshalBytes(b[:])
		op.Timeout = &unix.Timespec{Sec: ts.Sec, Nsec: ts.Nsec}
	}
	if err := eng.CheckCall(int(nsops)); err != nil {
		r.Reply(0, err)
		return
	}
	buf := make([]byte, int(nsops)*abi.SizeOfSembuf)
	if err := r.Task.ReadMem(r.Arg(1), buf); err != nil {
		r.Reply(0, err)
		return
	}
	op.Sops = make([]semengine.Sembuf, nsops)
	nowait := true
	for i := range op.Sops {
		var sb abi.Sembuf
		sb.UnmarshalBytes(buf[i*abi.SizeOfSembuf:])
		op.Sops[i] = semengine.Sembuf{Num: sb.Num, Op: sb.Op, Flg: sb.Flg}
		nowait = nowait && sb.Flg&semengine.IPCNoWait != 0
	}
	// The operation is done, or queued to sleep, in one critical section
	// of the engine; success is answered from inside it (Commit), so that
	// an answer the task does not take is undone before anyone sees it.
	op.Commit = func() bool { return r.commit(0) }
	op.Done = r.ended
	op.NoSleep = r.restarted
	w, err := eng.Start(&r.Task.Caller, op)
	started(r, w, err, semengine.ErrNotDelivered, semengine.ErrWouldSleep)
}

// semctl follows ksys_semctl: semid < 0 is EINVAL, then each command as
// semctl(2) describes it. The commands that wake, count or fail sleepers
// see every task asleep in the trap as a sleeper (Observe, drain.go).
//
// IPC_64 (0x100) is not stripped: x86_64 and arm64 kernels do not parse
// an IPC version (no CONFIG_ARCH_WANT_IPC_PARSE_VERSION) and answer a
// command with it EINVAL, measured with raw syscalls on Linux 6.18; glibc
// never sets it there.
func (n *Engines) semctl(r *Request) {
	eng := n.sem
	c := &r.Task.Caller
	semid, semnum, cmd, arg := int32(r.Arg(0)), int(int32(r.Arg(1))), int(int32(r.Arg(2))), r.Arg(3)
	if semid < 0 {
		r.Reply(0, unix.EINVAL)
		return
	}
	switch cmd {
	case ipcns.IPCInfo, semengine.SemInfo:
		n.semctlInfo(r, semid, cmd, arg)
	case ipcns.IPCStat, semengine.SemStat, semengine.SemStatAny:
		n.semctlStat(r, semid, cmd, arg)
	case semengine.GetAll:
		n.semctlGetAll(r, semid, arg)
	case semengine.SetAll:
		n.semctlSetAll(r, semid, arg)
	case semengine.SetVal:
		r.Observe(func() {
			if err := r.Valid(); err != nil {
				return
			}
			r.Reply(0, eng.SetVal(c, semid, semnum, int(int32(arg))))
		})
	case semengine.GetNCnt, semengine.GetZCnt:
		r.Observe(func() {
			v, err := eng.Get(c, semid, semnum, cmd)
			r.Reply(int64(v), err)
		})
	case semengine.GetVal, semengine.GetPID:
		v, err := eng.Get(c, semid, semnum, cmd)
		r.Reply(int64(v), err)
	case ipcns.IPCSet:
		n.semctlSet(r, semid, arg)
	case ipcns.IPCRmid:
		r.Observe(func() {
			if err := r.Valid(); err != nil {
				return
			}
			r.Reply(0, eng.Remove(c, semid))
		})
	default:
		r.Reply(0, unix.EINVAL)
	}
}

// semctlInfo is IPC_INFO and SEM_INFO: struct seminfo is written to
// arg; the answer is the highest index in use.
func (n *Engines) semctlInfo(r *Request, semid int32, cmd int, arg uint64) {
	si, maxIdx, err := n.sem.Info(semid, cmd)
	if err != nil {
		r.Reply(0, err)
		return
	}
	info := abi.SemInfo{
		Semmap: si.Semmap, Semmni: si.Semmni, Semmns: si.Semmns, Semmnu: si.Semmnu, Semmsl: si.Semmsl,
		Semopm: si.Semopm, Semume: si.Semume, Semusz: si.Semusz, Semvmx: si.Semvmx, Semaem: si.Semaem,
	}
	var b [abi.SizeOfSemInfo]byte
	info.MarshalBytes(b[:])
	if !r.copyOut(arg, b[:]) {
		return
	}
	r.Reply(int64(maxIdx), nil)
}

// semctlStat is IPC_STAT, SEM_STAT and SEM_STAT_ANY: struct semid64_ds
// is written to arg; the answer is 0 (IPC_STAT) or the set's id.
func (n *Engines) semctlStat(r *Request, semid int32, cmd int, arg uint64) {
	st, ret, err := n.sem.Stat(&r.Task.Caller, semid, cmd)
	if err != nil {
		r.Reply(0, err)
		return
	}
	ds := abi.SemidDS{Perm: abiPerm(&st.Perm), Otime: st.Otime, Ctime: st.Ctime, Nsems: uint64(st.Nsems)}
	arch := r.abiArch()
	var buf [maxSemidDSSize]byte
	b := buf[:abi.SizeOfSemidDS(arch)]
	ds.MarshalBytes(arch, b)
	if !r.copyOut(arg, b) {
		return
	}
	r.Reply(int64(ret), nil)
}

// semctlGetAll is GETALL: every semval, as an array of unsigned short,
// is written to arg.
func (n *Engines) semctlGetAll(r *Request, semid int32, arg uint64) {
	vals, err := n.sem.GetAll(&r.Task.Caller, semid)
	if err != nil {
		r.Reply(0, err)
		return
	}
	b := make([]byte, abi.SizeOfSemval*len(vals))
	abi.MarshalSemvals(b, vals)
	if !r.copyOut(arg, b) {
		return
	}
	r.Reply(0, nil)
}

// semctlSetAll is SETALL: every semval is read from the array of
// unsigned short at arg, once the engine knows how many there are.
func (n *Engines) semctlSetAll(r *Request, semid int32, arg uint64) {
	r.Observe(func() {
		if err := r.Valid(); err != nil {
			return
		}
		r.Reply(0, n.sem.SetAll(&r.Task.Caller, semid, func(nsems int) ([]uint16, error) {
			b := make([]byte, abi.SizeOfSemval*nsems)
			if err := r.Task.ReadMem(arg, b); err != nil {
				return nil, err
			}
			vals := make([]uint16, nsems)
			abi.UnmarshalSemvals(b, vals)
			return vals, nil
		}))
	})
}

// semctlSet is IPC_SET: struct semid64_ds is read from arg first
// (EFAULT), then sem_perm's uid, gid and the permission bits of mode are
// set.
func (n *Engines) semctlSet(r *Request, semid int32, arg uint64) {
	arch := r.abiArch()
	var buf [maxSemidDSSize]byte
	b := buf[:abi.SizeOfSemidDS(arch)]
	if err := r.Task.ReadMem(arg, b); err != nil {
		r.Reply(0, err)
		return
	}
	if err := r.Valid(); err != nil {
		return
	}
	var ds abi.SemidDS
	ds.UnmarshalBytes(arch, b)
	r.Reply(0, n.sem.SetPerm(&r.Task.Caller, semid, ds.Perm.UID, ds.Perm.GID, uint16(ds.Perm.Mode)))
}
