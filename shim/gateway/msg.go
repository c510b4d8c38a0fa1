package gateway

import (
	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/abi"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/msgengine"
	"golang.org/x/sys/unix"
)

// mtypeSize is sizeof(msgbuf.mtype), a long: the text follows it.
const mtypeSize = abi.SizeOfMtype

// bindCheck is the TOCTOU check before an effect that cannot be undone
// (a write into the caller, a create): a Task fresh from the cache is
// bound to the notification already; a new one is checked with ID_VALID.
func (r *Request) bindCheck() error {
	if r.Bound() {
		return nil
	}
	return r.Valid()
}

// copyOut writes a command's result b to addr in the caller, as the
// kernel's copy_to_user: first bindCheck (seccomp_unotify(2): the tid
// must still name the notifying task, or the write could land in a
// process that reused it), then the write, whose failure is answered
// EFAULT. It reports whether b was written; if not, the call is answered
// (or gone) and the handler returns.
func (r *Request) copyOut(addr uint64, b []byte) bool {
	if err := r.bindCheck(); err != nil {
		return false
	}
	if err := r.Task.WriteMem(addr, b); err != nil {
		r.Reply(0, err)
		return false
	}
	return true
}

func (n *Engines) msgget(r *Request) {
	key, flg := int32(r.Arg(0)), int(int32(r.Arg(1)))
	if mayCreate(key, flg) && r.Valid() != nil {
		return
	}
	id, err := n.msg.Msgget(&r.Task.Caller, key, flg)
	r.Reply(int64(id), err)
}

// msgsnd follows ksys_msgsnd: mtype is read first (EFAULT), then
// do_msgsnd checks msgsz, msqid and mtype (EINVAL), then the text is read
// (EFAULT), then the engine checks the rest. A message is committed (the
// answer sent) with the queue locked: a refused answer leaves the queue
// as it was.
func (n *Engines) msgsnd(r *Request) {
	eng := n.msg
	msqid, msgp, msgsz, flg := int32(r.Arg(0)), r.Arg(1), int64(r.Arg(2)), int(int32(r.Arg(3)))
	var mtype int64
	var data []byte
	read, owned := false, false
	res := eng.Resources()
	if msqid >= 0 && msgsz >= 0 && msgsz <= int64(uint32(res.Limits().MsgMax)) {
		// One copy of mtype and text; the order of the errors only
		// matters when it fails, and then the slow path below redoes it.
		// The text is read straight into the memory the queue keeps
		// (load_msg's buffer, in the pod's pages) if the namespace has
		// that memory at hand: nothing is allocated in the pod before
		// the checks that could fail the call, as in Linux. Otherwise
		// it is read into the heap and the engine copies it after its
		// checks.
		buf, ok := res.TryAllocText(msgsz)
		if !ok {
			buf = make([]byte, msgsz)
		}
		var h [mtypeSize]byte
		if r.Task.ReadMem2(msgp, h[:], buf) == nil {
			mtype = abi.UnmarshalMtype(h[:])
			data, read, owned = buf, true, ok
		} else if ok {
			res.FreeText(buf)
		}
	}
	if !read {
		var h [mtypeSize]byte
		if err := r.Task.ReadMem(msgp, h[:]); err != nil {
			r.Reply(0, err)
			return
		}
		mtype = abi.UnmarshalMtype(h[:])
		if err := eng.CheckSend(msqid, mtype, msgsz); err != nil {
			r.Reply(0, err)
			return
		}
		buf, err := res.AllocText(msgsz)
		if err != nil {
			r.Reply(0, unix.ENOMEM)
			return
		}
		if err := r.Task.ReadMem(msgp+mtypeSize, buf); err != nil {
			res.FreeText(buf)
			r.Reply(0, err)
			return
		}
		data, owned = buf, true
	}
	op := &msgengine.SndOp{MsqID: msqid, Type: mtype, Data: data, Owned: owned, Flags: flg}
	op.Commit = func() bool { return r.commit(0) }
	op.Done = r.ended
	op.NoSleep = r.restarted
	w, err := eng.StartSend(&r.Task.Caller, op)
	started(r, w, err, msgengine.ErrNotDelivered, msgengine.ErrWouldSleep)
}

// msgrcv follows do_msgrcv: msqid and msgsz (EINVAL), the MSG_COPY flags
// (EINVAL), the MSG_COPY buffer read (EFAULT), then the engine. The
// message is written into the caller's msgbuf (mtype, then the text) and
// the call answered in the engine's Commit, with the queue locked: a
// receiver that no longer waits leaves the message where it was. As in
// Linux, a message whose copy-out fails is consumed and the call fails
// with EFAULT.
//
// The answer is a byte count, which ADDFD|SEND cannot carry: where a
// signal may race with it, its fate is learnt from the kernel (commitWrite).
func (n *Engines) msgrcv(r *Request) {
	eng := n.msg
	msqid, msgp, msgsz, msgtyp, flg := int32(r.Arg(0)), r.Arg(1), int64(r.Arg(2)), int64(r.Arg(3)), int(int32(r.Arg(4)))
	if err := eng.CheckRecv(msqid, msgsz, flg); err != nil {
		r.Reply(0, err)
		return
	}
	if flg&msgengine.MsgCopy != 0 {
		// prepare_copy: load_msg(msgp, min(msgsz, msgmax)).
		n := min(msgsz, int64(uint32(eng.Resources().Limits().MsgMax)))
		if err := r.Task.ReadMem(msgp, make([]byte, n)); err != nil {
			r.Reply(0, err)
			return
		}
	}
	op := &msgengine.RcvOp{MsqID: msqid, Size: msgsz, Type: msgtyp, Flags: flg, Thread: r.Task.Thread, Discard: true}
	op.Commit = func(m *msgengine.Message) bool {
		var h [mtypeSize]byte
		abi.MarshalMtype(h[:], m.Type)
		var byKernel func(uint64) (bool, error)
		if flg&msgengine.MsgCopy == 0 {
			byKernel = func(pre uint64) (bool, error) { return r.commitByKernel(msqid, m.Type, m.Data, pre) }
		}
		return r.commitWrite(int64(len(m.Data)), msgp, mtypeSize+len(m.Data), func() error {
			return writeMsg(r.Task, msgp, h[:], m.Data)
		}, byKernel)
	}
	op.Done = func(_ msgengine.Message, err error) { r.ended(err) }
	op.NoSleep = r.restarted
	_, w, err := eng.StartRecv(&r.Task.Caller, op)
	started(r, w, err, msgengine.ErrNotDelivered, msgengine.ErrWouldSleep)
}

// msgctl follows ksys_msgctl: msqid < 0 or cmd < 0 is EINVAL, then per
// command the engine's checks, then the copy (EFAULT) — except IPC_SET,
// which copies msqid64_ds in first. Commands with IPC_64 (0x100) are
// EINVAL: x86_64 and arm64 do not parse an IPC version.
func (n *Engines) msgctl(r *Request) {
	eng := n.msg
	msqid, cmd, buf := int32(r.Arg(0)), int(int32(r.Arg(1))), r.Arg(2)
	if msqid < 0 || cmd < 0 {
		r.Reply(0, unix.EINVAL)
		return
	}
	switch cmd {
	case ipcns.IPCInfo, msgengine.MsgInfo:
		n.msgctlInfo(r, msqid, cmd, buf)
	case ipcns.IPCStat, msgengine.MsgStat, msgengine.MsgStatAny:
		n.msgctlStat(r, msqid, cmd, buf)
	case ipcns.IPCSet:
		n.msgctlSet(r, msqid, buf)
	case ipcns.IPCRmid:
		r.Observe(func() {
			if err := r.Valid(); err != nil {
				return
			}
			r.Reply(0, eng.Remove(&r.Task.Caller, msqid))
		})
	default:
		r.Reply(0, unix.EINVAL)
	}
}

// msgctlInfo is IPC_INFO and MSG_INFO: struct msginfo is written to buf;
// the answer is the highest index in use.
func (n *Engines) msgctlInfo(r *Request, msqid int32, cmd int, buf uint64) {
	mi, maxIdx, err := n.msg.Info(msqid, cmd)
	if err != nil {
		r.Reply(0, err)
		return
	}
	info := abi.MsgInfo{
		Msgpool: mi.Msgpool, Msgmap: mi.Msgmap, Msgmax: mi.Msgmax, Msgmnb: mi.Msgmnb,
		Msgmni: mi.Msgmni, Msgssz: mi.Msgssz, Msgtql: mi.Msgtql, Msgseg: mi.Msgseg,
	}
	var b [abi.SizeOfMsgInfo]byte
	info.MarshalBytes(b[:])
	if !r.copyOut(buf, b[:]) {
		return
	}
	r.Reply(int64(maxIdx), nil)
}

// msgctlStat is IPC_STAT, MSG_STAT and MSG_STAT_ANY: struct msqid64_ds
// is written to buf; the answer is 0 (IPC_STAT) or the queue's id.
func (n *Engines) msgctlStat(r *Request, msqid int32, cmd int, buf uint64) {
	st, ret, err := n.msg.Stat(&r.Task.Caller, msqid, cmd)
	if err != nil {
		r.Reply(0, err)
		return
	}
	ds := abi.MsqidDS{
		Perm:  abiPerm(&st.Perm),
		Stime: st.Stime, Rtime: st.Rtime, Ctime: st.Ctime,
		Cbytes: st.Cbytes, Qnum: st.Qnum, Qbytes: st.Qbytes,
		Lspid: st.Lspid, Lrpid: st.Lrpid,
	}
	var b [abi.SizeOfMsqidDS]byte
	ds.MarshalBytes(b[:])
	if !r.copyOut(buf, b[:]) {
		return
	}
	r.Reply(int64(ret), nil)
}

// msgctlSet is IPC_SET: struct msqid64_ds is read from buf first
// (EFAULT), then msg_perm's uid, gid, the permission bits of mode and
// msg_qbytes are set. Sleepers recheck their permission, senders may now
// fit: every task asleep in the trap is one (Observe, drain.go).
func (n *Engines) msgctlSet(r *Request, msqid int32, buf uint64) {
	var b [abi.SizeOfMsqidDS]byte
	if err := r.Task.ReadMem(buf, b[:]); err != nil {
		r.Reply(0, err)
		return
	}
	var ds abi.MsqidDS
	ds.UnmarshalBytes(b[:])
	r.Observe(func() {
		if err := r.Valid(); err != nil {
			return
		}
		r.Reply(0, n.msg.Set(&r.Task.Caller, msqid, ds.Perm.UID, ds.Perm.GID, ds.Perm.Mode, ds.Qbytes))
	})
}

// pageSize is the granularity at which a copy into the caller can fault.
var pageSize = uint64(unix.Getpagesize())

// writeMsg writes a received message into the caller's msgbuf at msgp:
// mtype, then the text. Linux stores mtype with put_user, a single 8-byte
// store that writes nothing if any of its bytes faults, while
// process_vm_writev writes page by page; so an mtype that straddles a page
// boundary is written second half first: if that page faults, nothing has
// been written, as in the kernel. The text is copied like copy_to_user,
// up to the fault.
func writeMsg(t *Task, msgp uint64, mtype, text []byte) error {
	cut := pageSize - msgp%pageSize
	if cut >= mtypeSize || msgp+mtypeSize < msgp {
		_, err := t.WriteMem2(msgp, mtype, text)
		return err
	}
	if err := t.WriteMem(msgp+cut, mtype[cut:]); err != nil {
		return err
	}
	if err := t.WriteMem(msgp, mtype[:cut]); err != nil {
		return err
	}
	if len(text) == 0 {
		return nil
	}
	return t.WriteMem(msgp+mtypeSize, text)
}
