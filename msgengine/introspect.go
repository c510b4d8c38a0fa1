package msgengine

import (
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// Introspection for host tools (ipcctl, metrics): one queue at a time
// under its lock, as IPC_STAT, never on the trapped path.

// QueueInfo is one message queue: what IPC_STAT reports (with pid
// handles, for the reader to translate), its waiters and its memory
// reservation.
type QueueInfo struct {
	ID                  int32
	Perm                ipcns.Perm
	Stime, Rtime, Ctime int64
	Cbytes, Qnum        uint64
	Qbytes              uint64
	Lspid, Lrpid        *ipcns.Pid
	Senders, Receivers  int
	// Reserved is the payload room the queue holds from the namespace's
	// budget of msgmni × msgmnb bytes (reserve.go).
	Reserved int64
}

// Queues returns every queue of the namespace in index order.
func (e *Engine) Queues() []QueueInfo {
	out, _ := e.QueuesN(0, -1)
	return out
}

// QueuesN returns at most limit queues (no cap when limit < 0), from the
// offset-th in index order, and the number of queues.
func (e *Engine) QueuesN(offset, limit int) (out []QueueInfo, total int) {
	all := e.ids.All()
	if offset < len(all) {
		all = all[max(offset, 0):]
	} else {
		all = nil
	}
	for _, q := range all {
		if limit >= 0 && len(out) >= limit {
			break
		}
		q.mu.Lock()
		if !q.Deleted() {
			qi := QueueInfo{ID: q.ID(), Perm: *q.Perm(), Stime: q.stime, Rtime: q.rtime, Ctime: q.ctime,
				Cbytes: uint64(q.cbytes.Load()), Qnum: uint64(q.qnum.Load()), Qbytes: q.qbytes,
				Lspid: q.lspid, Lrpid: q.lrpid, Reserved: q.reserved}
			for w := q.senders.Front(); w != nil; w = w.Next() {
				qi.Senders++
			}
			for w := q.receivers.Front(); w != nil; w = w.Next() {
				qi.Receivers++
			}
			out = append(out, qi)
		}
		q.mu.Unlock()
	}
	return out, e.ids.InUse()
}

// WaiterInfo is a sleeping msgsnd or msgrcv.
type WaiterInfo struct {
	MsqID int32
	// Send is true for a sender (waiting for room), false for a receiver
	// (waiting for a matching message).
	Send bool
	Pid  *ipcns.Pid
	// Thread is the sleeping thread's own handle when it does not lead
	// its thread group (receivers only), nil otherwise.
	Thread *ipcns.Pid
	// Type is the sender's mtype, or the receiver's msgtyp as the caller
	// passed it (0: any; > 0: that type, or any other with MSG_EXCEPT;
	// < 0: the lowest type up to -msgtyp; with MSG_COPY an index).
	Type int64
	// Mode names the receiver's search: "any", "equal", "except",
	// "lessequal" or "copy"; empty for a sender.
	Mode string
	// Size is the sender's message size or the receiver's msgsz.
	Size  int64
	Since time.Time
}

// Waiters returns every sleeping msgsnd and msgrcv of the namespace, queue
// by queue in index order, senders first, each list in queue order.
func (e *Engine) Waiters() []WaiterInfo {
	out, _ := e.WaitersN(-1)
	return out
}

// WaitersN returns at most limit sleepers (no cap when limit < 0) in
// the order of Waiters, and how many sleep in all.
func (e *Engine) WaitersN(limit int) (out []WaiterInfo, total int) {
	for _, q := range e.ids.All() {
		q.mu.Lock()
		for w := q.senders.Front(); w != nil; w = w.Next() {
			total++
			if limit >= 0 && len(out) >= limit {
				continue
			}
			out = append(out, WaiterInfo{MsqID: q.ID(), Send: true, Pid: w.caller.Pid, Type: w.mtype,
				Size: int64(len(w.data)), Since: w.since})
		}
		for w := q.receivers.Front(); w != nil; w = w.Next() {
			total++
			if limit >= 0 && len(out) >= limit {
				continue
			}
			wi := WaiterInfo{MsqID: q.ID(), Pid: w.caller.Pid, Type: w.typ, Size: w.size, Since: w.since}
			if w.thread != w.caller.Pid {
				wi.Thread = w.thread
			}
			switch w.mode {
			case searchAny:
				wi.Mode = "any"
			case searchEqual:
				wi.Mode = "equal"
			case searchNotEqual:
				wi.Mode = "except"
			case searchLessEqual:
				wi.Mode, wi.Type = "lessequal", -w.typ
			case searchNumber:
				wi.Mode = "copy"
			}
			out = append(out, wi)
		}
		q.mu.Unlock()
	}
	return out, total
}

// Usage returns what the namespace holds: queues (against MSGMNI),
// queued messages and bytes, and the payload room reserved from the
// namespace's budget of msgmni × msgmnb bytes.
func (e *Engine) Usage() (queues int, msgs, bytes, reserved int64) {
	for _, q := range e.ids.All() {
		queues++
		msgs += q.qnum.Load()
		bytes += q.cbytes.Load()
	}
	return queues, msgs, bytes, e.reserved.Load()
}

// Summary is what the namespace holds, counted queue by queue without
// reading a message.
type Summary struct {
	Queues             int
	Messages, Bytes    int64
	Reserved           int64
	Senders, Receivers int // sleeping msgsnd and msgrcv
}

// Summary returns the namespace's counts: one walk of the queues, each
// under its lock only to count its sleepers.
func (e *Engine) Summary() Summary {
	var s Summary
	for _, q := range e.ids.All() {
		q.mu.Lock()
		if !q.Deleted() {
			s.Queues++
			s.Messages += q.qnum.Load()
			s.Bytes += q.cbytes.Load()
			for w := q.senders.Front(); w != nil; w = w.Next() {
				s.Senders++
			}
			for w := q.receivers.Front(); w != nil; w = w.Next() {
				s.Receivers++
			}
		}
		q.mu.Unlock()
	}
	s.Reserved = e.reserved.Load()
	return s
}
