package msgengine

import (
	"math"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// The msgctl commands, one method per group of ksys_msgctl. The gateway
// checks msqid < 0 and cmd < 0 (EINVAL) first, as ksys_msgctl does, and
// refuses unknown commands with EINVAL; on x86_64 that includes commands
// or'ed with IPC_64 (0x100), which msgctl, unlike the old ipc(2)
// multiplexer, does not strip. Each method repeats the msqid check.

// Info is msgctl IPC_INFO or MSG_INFO (msgctl_info): the limits, and for
// MSG_INFO the queues, messages and bytes in use in msgpool, msgmap and
// msgtql. It returns the highest index in use (0 when there is none).
func (e *Engine) Info(msqid int32, cmd int) (Msginfo, int, error) {
	if msqid < 0 {
		return Msginfo{}, 0, unix.EINVAL
	}
	lim := e.ns.Limits()
	mi := Msginfo{
		Msgmni: int32(lim.MsgMNI), Msgmax: int32(lim.MsgMax), Msgmnb: int32(lim.MsgMNB),
		Msgssz: msgSSZ, Msgseg: msgSeg,
		Msgmap: msgMap, Msgpool: msgPool, Msgtql: msgTQL,
	}
	if cmd == MsgInfo {
		// The totals are the sum of the queues' own counters, the way
		// Linux sums its per-CPU counters: nothing shared is written on
		// the send and receive paths.
		var hdrs, bytes int64
		qs := e.ids.All()
		for _, q := range qs {
			hdrs += q.qnum.Load()
			bytes += q.cbytes.Load()
		}
		mi.Msgpool = int32(len(qs))
		mi.Msgmap = int32(min(hdrs, math.MaxInt32))
		mi.Msgtql = int32(min(bytes, math.MaxInt32))
	}
	return mi, max(e.ids.MaxIndex(), 0), nil
}

// Stat is msgctl IPC_STAT, MSG_STAT or MSG_STAT_ANY (msgctl_stat). IPC_STAT
// takes an id and returns 0; the *_STAT commands take an index and return
// the id. MSG_STAT_ANY skips the read permission check. Errors: EINVAL,
// EACCES, EIDRM. lspid and lrpid are reported in c's pid namespace.
func (e *Engine) Stat(c *ipcns.Caller, msqid int32, cmd int) (MsqidDS, int, error) {
	if msqid < 0 {
		return MsqidDS{}, 0, unix.EINVAL
	}
	var q *Queue
	var err error
	if cmd == ipcns.IPCStat {
		q, err = e.ids.Lookup(msqid)
	} else {
		q, err = e.ids.LookupIndex(msqid)
	}
	if err != nil {
		return MsqidDS{}, 0, err
	}
	if cmd != MsgStatAny {
		if err := q.Perm().Check(&c.Creds, ipcns.ReadAccess); err != nil {
			return MsqidDS{}, 0, err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.Deleted() {
		return MsqidDS{}, 0, unix.EIDRM
	}
	ns := c.PidNS()
	ds := MsqidDS{
		Perm:  *q.Perm(),
		Stime: q.stime, Rtime: q.rtime, Ctime: q.ctime,
		Cbytes: uint64(q.cbytes.Load()), Qnum: uint64(q.qnum.Load()), Qbytes: q.qbytes,
		Lspid: q.lspid.In(ns), Lrpid: q.lrpid.In(ns),
	}
	if cmd == ipcns.IPCStat {
		return ds, 0, nil
	}
	return ds, int(q.ID()), nil
}

// lookupOwner finds msqid for IPC_SET or IPC_RMID (ipcctl_obtain_check):
// EINVAL, then EPERM unless c owns or created the queue or has
// CAP_SYS_ADMIN.
func (e *Engine) lookupOwner(c *ipcns.Caller, msqid int32) (*Queue, error) {
	q, err := e.lookup(msqid)
	if err != nil {
		return nil, err
	}
	if err := q.Perm().CheckOwner(&c.Creds); err != nil {
		return nil, err
	}
	return q, nil
}

// Set is msgctl IPC_SET (msgctl_down): uid, gid and mode bits from
// msg_perm, and msg_qbytes. Linux passes msg_qbytes on as an int, so only
// its low 32 bits count: raising it above msgmnb, compared as unsigned,
// needs CAP_SYS_RESOURCE (EPERM), and the value stored is that int sign-
// extended. Then an invalid uid or gid gives EINVAL. Sleeping receivers
// recheck their permission (EACCES) and sleeping senders whose message now
// fits are woken. Errors: EINVAL, EPERM (owner), EPERM (qbytes), EINVAL.
func (e *Engine) Set(c *ipcns.Caller, msqid int32, uid, gid uint32, mode uint32, qbytes uint64) error {
	q, err := e.lookupOwner(c, msqid)
	if err != nil {
		return err
	}
	qb := int32(uint32(qbytes))
	if uint32(qb) > uint32(e.ns.Limits().MsgMNB) && !c.Creds.Capable(ipcns.CapSysResource) {
		return unix.EPERM
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.Deleted() {
		// Linux holds the ids' rwsem from the lookup on: a queue
		// removed meanwhile would not have been found.
		return unix.EINVAL
	}
	p, err := q.Perm().Updated(uid, gid, uint16(mode&0o777))
	if err != nil {
		return err
	}
	q.SetPerm(p)
	q.qbytes = uint64(int64(qb))
	q.ctime = now()
	// expunge_all(msq, -EAGAIN): every sleeping receiver runs its loop
	// again. None can find a message (a queued message matching a
	// sleeping receiver would have been handed to it), so each either
	// fails the permission check or sleeps again, in order.
	rs := q.receivers.TakeAll()
	for w := rs.Front(); w != nil; {
		next := w.Next()
		rs.Remove(w)
		switch {
		case w.isSignalled():
			w.finish(int(unix.EINTR))
		case p.Check(&w.caller.Creds, ipcns.ReadAccess) != nil:
			w.finish(int(unix.EACCES))
		default:
			q.receivers.PushBack(w)
		}
		w = next
	}
	q.shrinkLocked()
	q.wakeSendersLocked()
	return nil
}

// Remove is msgctl IPC_RMID (freeque): the queue and its messages go at
// once and every sleeper fails with EIDRM. Errors: EINVAL, EPERM.
func (e *Engine) Remove(c *ipcns.Caller, msqid int32) error {
	q, err := e.lookupOwner(c, msqid)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.Deleted() {
		return unix.EINVAL
	}
	e.freeLocked(q)
	return nil
}

// Free frees every queue, as Linux does when the IPC namespace dies
// (free_ipcs, freeque): their sleepers fail with EIDRM, and their texts
// and charges are given back. A send that comes after (a call that found
// the namespace before it was dropped) fails with EIDRM.
func (e *Engine) Free() {
	e.freed.Store(true)
	for _, q := range e.ids.All() {
		q.mu.Lock()
		if !q.Deleted() {
			e.freeLocked(q)
		}
		q.mu.Unlock()
	}
}

// freeLocked is freeque: q and its messages go, its sleepers fail with
// EIDRM.
func (e *Engine) freeLocked(q *Queue) {
	for _, l := range []*waitList{&q.receivers, &q.senders} {
		ws := l.TakeAll()
		for w := ws.Front(); w != nil; {
			next := w.Next()
			ws.Remove(w)
			w.finish(int(unix.EIDRM))
			w = next
		}
	}
	e.ids.Remove(q)
	e.ns.Uncharge(q.qnum.Load() * msgBase)
	q.msgs.each(func(m *msg) { e.ns.FreeText(m.text()) })
	q.msgs.clear()
	q.qnum.Store(0)
	q.cbytes.Store(0)
	q.unreserveLocked()
	q.lspid, q.lrpid = nil, nil
}
