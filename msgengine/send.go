package msgengine

import (
	"bytes"
	"context"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// CheckSend reports the errors msgsnd gives before it reads the message
// text from the caller's memory (do_msgsnd before load_msg): EINVAL for
// msgsz above msgmax or negative or msqid < 0, then EINVAL for mtype < 1.
// The gateway reads mtype (EFAULT), calls CheckSend, reads the text
// (EFAULT) and calls Msgsnd, which repeats the checks.
func (e *Engine) CheckSend(msqid int32, mtype int64, msgsz int64) error {
	if msgsz > int64(uint32(e.ns.Limits().MsgMax)) || msgsz < 0 || msqid < 0 {
		return unix.EINVAL
	}
	if mtype < 1 {
		return unix.EINVAL
	}
	return nil
}

// Msgsnd is msgsnd(2) for c. It sleeps while the message does not fit in
// the queue (msg_fits_inqueue); cancelling ctx interrupts the sleep with
// EINTR. Errors in do_msgsnd's order: EINVAL (msgsz, msqid), EINVAL
// (mtype), EINVAL (no such id), EACCES, EIDRM, EAGAIN (full queue with
// IPC_NOWAIT); while asleep EIDRM (removed), EACCES (permissions changed
// when it was woken), EINTR; ErrNotDelivered when Commit refused. It is
// StartSend for callers that can block a goroutine; op.Done is its own.
func (e *Engine) Msgsnd(ctx context.Context, c *ipcns.Caller, op *SndOp) error {
	ended := make(chan error, 1)
	op.Done = func(err error) { ended <- err }
	op.Signalled = func() bool { return ctx.Err() != nil }
	wt, err := e.StartSend(c, op)
	if wt == nil {
		return err
	}
	return block(ctx, wt, ended, error(unix.EINTR))
}

// StartSend begins msgsnd(2) for c. It returns (nil, nil) when the
// message was sent at once (Commit, if set, took it), (nil, err) when the
// call failed (Msgsnd's errors, or ErrWouldSleep with op.NoSleep), and
// (w, nil) when the sender went to sleep — queued in the same critical
// section that found the queue full — ending with op.Done or w.Cancel.
func (e *Engine) StartSend(c *ipcns.Caller, op *SndOp) (*Wait, error) {
	size := int64(len(op.Data))
	text := op.Data
	if err := e.CheckSend(op.MsqID, op.Type, size); err != nil {
		if op.Owned {
			e.ns.FreeText(text)
		}
		return nil, err
	}
	// load_msg: the message is allocated, and charged to the sender's
	// pod, before the queue is looked up (ENOMEM first). The charge and
	// the text go with the message into the queue, or are given back.
	if !op.Owned {
		t, err := e.ns.AllocText(size)
		if err != nil {
			return nil, unix.ENOMEM
		}
		copy(t, op.Data)
		text = t
	}
	if e.ns.Charge(msgBase) != nil {
		e.ns.FreeText(text)
		return nil, unix.ENOMEM
	}
	w, err := e.startSend(c, op, text)
	if w == nil && (err != nil || !op.stored) {
		e.ns.Uncharge(msgBase)
		e.ns.FreeText(text)
	}
	return w, err
}

func (e *Engine) startSend(c *ipcns.Caller, op *SndOp, text []byte) (*Wait, error) {
	size := int64(len(text))
	q, err := e.ids.Lookup(op.MsqID)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.Perm().Check(&c.Creds, ipcns.WriteAccess); err != nil {
		return nil, err
	}
	if q.Deleted() || q.e.freed.Load() {
		return nil, unix.EIDRM
	}
	if q.fitsLocked(size) {
		if op.Commit != nil && !op.Commit() {
			return nil, ErrNotDelivered
		}
		op.stored = q.sendLocked(c.Pid, op.Type, text)
		return nil, nil
	}
	if op.Flags&IPCNoWait != 0 {
		return nil, unix.EAGAIN
	}
	if op.NoSleep {
		return nil, ErrWouldSleep
	}
	// ss_add: sleep at the tail of the senders, holding the message's
	// text and charge until it is stored or the sleep ends without it.
	w := &waiter{caller: c, mtype: op.Type, data: text, sCommit: op.Commit, sDone: op.Done, signalled: op.Signalled, holds: true, ns: e.ns}
	return q.sleep(w, &q.senders), nil
}

// sendLocked stores a message that fits: the sender becomes msg_lspid,
// and the message goes to the first waiting receiver that takes it or to
// the tail of the queue (do_msgsnd after its loop).
//
// It reports whether the message was stored in the queue (its charge
// stays with it) rather than handed to a receiver.
func (q *Queue) sendLocked(pid *ipcns.Pid, mtype int64, data []byte) bool {
	ipcns.StorePid(&q.lspid, pid)
	q.stime = now()
	if q.pipelinedSendLocked(mtype, data) {
		return false
	}
	q.msgs.push(mtype, data)
	q.qnum.Add(1)
	q.cbytes.Add(int64(len(data)))
	return true
}

// pipelinedSendLocked hands the message to the first waiting receiver
// whose selector matches it and whose buffer is large enough; a matching
// receiver with too small a buffer and no MSG_NOERROR fails with E2BIG and
// the scan goes on (pipelined_send). A receiver whose Commit refuses is
// taken off as if it had been gone already, and the scan goes on. It
// reports whether a receiver took the message.
func (q *Queue) pipelinedSendLocked(mtype int64, data []byte) bool {
	for w := q.receivers.Front(); w != nil; {
		next := w.Next()
		if !matches(w.mode, w.typ, mtype) {
			w = next
			continue
		}
		q.receivers.Remove(w)
		if w.maxsize < int64(len(data)) {
			w.finish(int(unix.E2BIG))
			w = next
			continue
		}
		lrpid, rtime := q.lrpid, q.rtime
		ipcns.StorePid(&q.lrpid, w.thread)
		q.rtime = now()
		w.got = Message{Type: mtype, Data: data[:min(int64(len(data)), w.size)]}
		if w.rCommit != nil && !w.rCommit(&w.got) {
			q.lrpid, q.rtime = lrpid, rtime
			w.got = Message{}
			w.finish(statusUndelivered)
			w = next
			continue
		}
		if w.discard {
			w.got.Data = nil
		} else {
			// The sender's text is given back when this returns.
			w.got.Data = bytes.Clone(w.got.Data)
		}
		w.finish(0)
		return true
	}
	return false
}

// matches is testmsg: whether a message of type mtype satisfies a
// receiver's selector.
func matches(mode int, typ, mtype int64) bool {
	switch mode {
	case searchAny, searchNumber:
		return true
	case searchEqual:
		return mtype == typ
	case searchNotEqual:
		return mtype != typ
	case searchLessEqual:
		return mtype <= typ
	}
	return false
}

// wakeSendersLocked is ss_wakeup(msq, wake_q, false) followed by what the
// woken senders do when they run: senders whose message fits the queue as
// it is now are woken, in order, and the others keep their order; then
// each woken sender, in wake order, fails with EINTR if a signal is
// pending, with EACCES if it may no longer write, sends if its message
// still fits, and otherwise sleeps again at the tail.
func (q *Queue) wakeSendersLocked() {
	if q.senders.Empty() {
		return
	}
	var woken waitList
	for w := q.senders.Front(); w != nil; {
		next := w.Next()
		if q.fitsLimit(int64(len(w.data))) {
			q.senders.Remove(w)
			woken.PushBack(w)
		}
		w = next
	}
	for w := woken.Front(); w != nil; {
		next := w.Next()
		woken.Remove(w)
		switch {
		case w.isSignalled():
			w.finish(int(unix.EINTR))
		case q.Perm().Check(&w.caller.Creds, ipcns.WriteAccess) != nil:
			w.finish(int(unix.EACCES))
		case q.fitsLocked(int64(len(w.data))):
			if w.sCommit != nil && !w.sCommit() {
				w.finish(statusUndelivered)
				break
			}
			if q.sendLocked(w.caller.Pid, w.mtype, w.data) {
				w.holds = false // the stored message holds them now
			}
			w.finish(0)
		default:
			q.senders.PushBack(w)
		}
		w = next
	}
}
