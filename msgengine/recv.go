package msgengine

import (
	"bytes"
	"context"
	"math"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// CheckRecv reports the errors msgrcv gives before it touches the caller's
// memory (do_msgrcv before prepare_copy): EINVAL for msqid < 0 or msgsz <
// 0, then EINVAL for MSG_COPY with MSG_EXCEPT or without IPC_NOWAIT. With
// MSG_COPY the gateway then reads min(msgsz, msgmax) bytes of the buffer,
// as prepare_copy does (EFAULT), before calling Msgrcv.
func (e *Engine) CheckRecv(msqid int32, msgsz int64, flags int) error {
	if msqid < 0 || msgsz < 0 {
		return unix.EINVAL
	}
	if flags&MsgCopy != 0 && (flags&MsgExcept != 0 || flags&IPCNoWait == 0) {
		return unix.EINVAL
	}
	return nil
}

// convertMode is convert_mode: the search mode for msgtyp and flags, and
// the type it compares with (|msgtyp| for msgtyp < 0).
func convertMode(msgtyp int64, flags int) (int, int64) {
	switch {
	case flags&MsgCopy != 0:
		return searchNumber, msgtyp
	case msgtyp == 0:
		return searchAny, 0
	case msgtyp < 0:
		if msgtyp == math.MinInt64 {
			return searchLessEqual, math.MaxInt64
		}
		return searchLessEqual, -msgtyp
	case flags&MsgExcept != 0:
		return searchNotEqual, msgtyp
	}
	return searchEqual, msgtyp
}

// Msgrcv is msgrcv(2) for c. msgtyp 0 takes the first message, > 0 the
// first of that type (of any other type with MSG_EXCEPT), < 0 the first of
// the lowest type <= |msgtyp|; MSG_COPY copies the message at index msgtyp
// without dequeuing it. It sleeps while no message matches; cancelling
// ctx interrupts the sleep with EINTR. Errors in do_msgrcv's order:
// EINVAL (msqid, msgsz), EINVAL (MSG_COPY flags), EINVAL (no such id),
// EACCES, EIDRM, E2BIG (the message stays queued), EINVAL (MSG_COPY into
// a buffer smaller than the message, with MSG_NOERROR), ENOMSG
// (IPC_NOWAIT); while asleep EIDRM, E2BIG (a message sent to it did not
// fit its buffer), EACCES (permissions changed), EINTR; ErrNotDelivered
// when Commit refused. The returned Message is the caller's to keep. It is
// StartRecv for callers that can block a goroutine; op.Done is its own.
func (e *Engine) Msgrcv(ctx context.Context, c *ipcns.Caller, op *RcvOp) (Message, error) {
	type result struct {
		m   Message
		err error
	}
	ended := make(chan result, 1)
	op.Done = func(m Message, err error) { ended <- result{m, err} }
	m, wt, err := e.StartRecv(c, op)
	if wt == nil {
		return m, err
	}
	res := block(ctx, wt, ended, result{err: unix.EINTR})
	return res.m, res.err
}

// StartRecv begins msgrcv(2) for c. It returns the message (after Commit,
// if set, took it) or the error when the call ends at once (Msgrcv's
// errors, or ErrWouldSleep with op.NoSleep), and a Wait when the receiver
// went to sleep — queued in the same critical section that found no
// message — ending with op.Done or w.Cancel.
func (e *Engine) StartRecv(c *ipcns.Caller, op *RcvOp) (Message, *Wait, error) {
	if err := e.CheckRecv(op.MsqID, op.Size, op.Flags); err != nil {
		return Message{}, nil, err
	}
	mode, typ := convertMode(op.Type, op.Flags)
	q, err := e.ids.Lookup(op.MsqID)
	if err != nil {
		return Message{}, nil, err
	}
	if err := q.Perm().Check(&c.Creds, ipcns.ReadAccess); err != nil {
		return Message{}, nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.Deleted() {
		return Message{}, nil, unix.EIDRM
	}
	if m, done, err := q.takeLocked(c, op, mode, typ); done {
		return m, nil, err
	}
	if op.Flags&IPCNoWait != 0 {
		return Message{}, nil, unix.ENOMSG
	}
	if op.NoSleep {
		return Message{}, nil, ErrWouldSleep
	}
	w := &waiter{caller: c, mode: mode, typ: typ, size: op.Size, rCommit: op.Commit, rDone: op.Done, discard: op.Discard, thread: op.Thread}
	if w.thread == nil {
		w.thread = c.Pid
	}
	w.maxsize = op.Size
	if op.Flags&MsgNoError != 0 {
		w.maxsize = math.MaxInt32 // r_maxsize = INT_MAX
	}
	return Message{}, q.sleep(w, &q.receivers), nil
}

// takeLocked looks for a message for op (find_msg) and, if there is one,
// receives it: done reports whether the search ended the call, with a
// message or an error.
func (q *Queue) takeLocked(c *ipcns.Caller, op *RcvOp, mode int, typ int64) (Message, bool, error) {
	noError := op.Flags&MsgNoError != 0
	if mode == searchNumber {
		m, mtype := q.msgs.nth(typ, q.qnum.Load())
		if m == nil {
			return Message{}, false, nil
		}
		if op.Size < m.size && !noError {
			return Message{}, true, unix.E2BIG
		}
		// copy_msg refuses a message larger than the copy buffer,
		// min(msgsz, msgmax) bytes, even with MSG_NOERROR.
		if m.size > min(op.Size, int64(uint32(q.e.ns.Limits().MsgMax))) {
			return Message{}, true, unix.EINVAL
		}
		out := Message{Type: mtype, Data: m.text()}
		if op.Commit != nil && !op.Commit(&out) {
			return Message{}, true, ErrNotDelivered
		}
		if op.Discard {
			out.Data = nil
		} else {
			out.Data = bytes.Clone(out.Data) // the text stays the queue's
		}
		return out, true, nil
	}
	t := q.msgs.find(mode, typ)
	if t == nil {
		return Message{}, false, nil
	}
	m := t.head
	if op.Size < m.size && !noError {
		return Message{}, true, unix.E2BIG
	}
	out := Message{Type: t.typ, Data: m.text()[:min(m.size, op.Size)]}
	if op.Commit != nil && !op.Commit(&out) {
		return Message{}, true, ErrNotDelivered
	}
	if op.Discard {
		out.Data = nil
	} else {
		out.Data = bytes.Clone(out.Data) // the text is given back below
	}
	q.msgs.popHead(t)
	q.qnum.Add(-1)
	q.cbytes.Add(-m.size)
	q.e.ns.Uncharge(msgBase)
	q.e.ns.FreeText(m.text())
	q.rtime = now()
	ipcns.StorePid(&q.lrpid, c.Pid)
	if q.reserved > q.baselineLocked() {
		q.shrinkLocked()
	}
	q.wakeSendersLocked()
	return out, true, nil
}
