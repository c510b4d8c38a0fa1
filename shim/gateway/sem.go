package gateway

import (
	"encoding/binary"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"golang.org/x/sys/unix"
)

func (n *Engines) semget(r *Request) {
	eng := n.sem
	if err := r.Valid(); err != nil {
		return
	}
	id, err := eng.Semget(&r.Task.Caller, int32(r.Arg(0)), int(int32(r.Arg(1))), int(int32(r.Arg(2))))
	r.Reply(int64(id), err)
}

// sembufSize is sizeof(struct sembuf).
const sembufSize = 6

func (n *Engines) semop(r *Request, timed bool) {
	eng := n.sem
	semid, nsops := int32(r.Arg(0)), uint32(r.Arg(2))
	op := &semengine.Op{SemID: semid}
	// Linux's order: the timeout is copied first (EFAULT), then nsops is
	// checked (E2BIG, EINVAL), then the operations are copied (EFAULT),
	// then semid and the rest are checked by the engine.
	if timed && r.Arg(3) != 0 {
		var b [16]byte
		if err := r.Task.ReadMem(r.Arg(3), b[:]); err != nil {
			r.Reply(0, err)
			return
		}
		op.Timeout = &unix.Timespec{
			Sec:  int64(binary.LittleEndian.Uint64(b[0:])),
			Nsec: int64(binary.LittleEndian.Uint64(b[8:])),
		}
	}
	if err := eng.CheckCall(int(nsops)); err != nil {
		r.Reply(0, err)
		return
	}
	buf := make([]byte, int(nsops)*sembufSize)
	if err := r.Task.ReadMem(r.Arg(1), buf); err != nil {
		r.Reply(0, err)
		return
	}
	op.Sops = make([]semengine.Sembuf, nsops)
	nowait := true
	for i := range op.Sops {
		b := buf[i*sembufSize:]
		op.Sops[i] = semengine.Sembuf{
			Num: binary.LittleEndian.Uint16(b),
			Op:  int16(binary.LittleEndian.Uint16(b[2:])),
			Flg: int16(binary.LittleEndian.Uint16(b[4:])),
		}
		nowait = nowait && op.Sops[i].Flg&semengine.IPCNoWait != 0
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

// Layout of struct semid64_ds on x86_64 and arm64 (104 bytes): ipc64_perm
// (key, uid, gid, cuid, cgid, mode+pad, seq+pad, 2 unused longs), otime,
// unused, ctime, unused, nsems, 2 unused.
const semidDSSize = 104

// seminfoSize is sizeof(struct seminfo): ten ints.
const seminfoSize = 40

func (n *Engines) semctl(r *Request) {
	eng := n.sem
	c := &r.Task.Caller
	semid, semnum, cmd, arg := int32(r.Arg(0)), int(int32(r.Arg(1))), int(int32(r.Arg(2))), r.Arg(3)
	if semid < 0 {
		r.Reply(0, unix.EINVAL)
		return
	}
	le := binary.LittleEndian
	// IPC_64 (0x100) is not stripped: x86_64 and arm64 kernels do not
	// parse an IPC version (no CONFIG_ARCH_WANT_IPC_PARSE_VERSION) and
	// answer a command with it EINVAL, measured with raw syscalls on
	// Linux 6.18; glibc never sets it there.
	switch cmd {
	case ipcns.IPCInfo, semengine.SemInfo:
		si, maxIdx, err := eng.Info(semid, cmd)
		if err != nil {
			r.Reply(0, err)
			return
		}
		var b [seminfoSize]byte
		for i, v := range []int32{si.Semmap, si.Semmni, si.Semmns, si.Semmnu, si.Semmsl, si.Semopm, si.Semume, si.Semusz, si.Semvmx, si.Semaem} {
			le.PutUint32(b[i*4:], uint32(v))
		}
		if !r.copyOut(arg, b[:]) {
			return
		}
		r.Reply(int64(maxIdx), nil)
	case ipcns.IPCStat, semengine.SemStat, semengine.SemStatAny:
		ds, ret, err := eng.Stat(c, semid, cmd)
		if err != nil {
			r.Reply(0, err)
			return
		}
		var b [semidDSSize]byte
		le.PutUint32(b[0:], uint32(ds.Perm.Key))
		le.PutUint32(b[4:], ds.Perm.UID)
		le.PutUint32(b[8:], ds.Perm.GID)
		le.PutUint32(b[12:], ds.Perm.CUID)
		le.PutUint32(b[16:], ds.Perm.CGID)
		le.PutUint16(b[20:], ds.Perm.Mode)
		le.PutUint16(b[24:], ds.Perm.Seq)
		le.PutUint64(b[48:], uint64(ds.Otime))
		le.PutUint64(b[64:], uint64(ds.Ctime))
		le.PutUint64(b[80:], uint64(ds.Nsems))
		if !r.copyOut(arg, b[:]) {
			return
		}
		r.Reply(int64(ret), nil)
	case semengine.GetAll:
		vals, err := eng.GetAll(c, semid)
		if err != nil {
			r.Reply(0, err)
			return
		}
		b := make([]byte, 2*len(vals))
		for i, v := range vals {
			le.PutUint16(b[2*i:], v)
		}
		if !r.copyOut(arg, b) {
			return
		}
		r.Reply(0, nil)
	// The commands that wake, count or fail sleepers see every task
	// asleep in the trap as a sleeper (Observe, drain.go).
	case semengine.SetAll:
		r.Observe(func() {
			if err := r.Valid(); err != nil {
				return
			}
			r.Reply(0, eng.SetAll(c, semid, func(nsems int) ([]uint16, error) {
				b := make([]byte, 2*nsems)
				if err := r.Task.ReadMem(arg, b); err != nil {
					return nil, err
				}
				vals := make([]uint16, nsems)
				for i := range vals {
					vals[i] = le.Uint16(b[2*i:])
				}
				return vals, nil
			}))
		})
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
		var b [semidDSSize]byte
		if err := r.Task.ReadMem(arg, b[:]); err != nil {
			r.Reply(0, err)
			return
		}
		if err := r.Valid(); err != nil {
			return
		}
		r.Reply(0, eng.SetPerm(c, semid, le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint16(b[20:])))
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
