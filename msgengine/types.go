package msgengine

import (
	"errors"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// msgsnd and msgrcv flags (include/uapi/linux/msg.h, ipc.h).
const (
	IPCNoWait  = ipcns.IPCNoWait
	MsgNoError = 0o10000 // truncate a too-long message instead of E2BIG
	MsgExcept  = 0o20000 // msgtyp > 0: first message of any other type
	MsgCopy    = 0o40000 // copy the message at index msgtyp, do not dequeue
)

// msgctl commands (include/uapi/linux/msg.h). IPC_STAT, IPC_SET, IPC_RMID
// and IPC_INFO are ipcns's.
const (
	MsgStat    = 11
	MsgInfo    = 12
	MsgStatAny = 13
)

// Compile-time constants of include/uapi/linux/msg.h that IPC_INFO reports.
const (
	msgPool = 32000 * 16384 / 1024 // MSGPOOL: MSGMNI * MSGMNB / 1024
	msgMap  = 16384                // MSGMAP: MSGMNB
	msgTQL  = 16384                // MSGTQL: MSGMNB
	msgSSZ  = 16                   // MSGSSZ
	msgSeg  = 0xffff               // MSGSEG: MSGPOOL*1024/MSGSSZ capped at 0xffff
)

// ErrNotDelivered is returned by Msgsnd and Msgrcv when the call completed
// but its Commit reported that the caller could no longer take the result:
// the call has been undone as if it had never run.
var ErrNotDelivered = errors.New("msgengine: result not delivered; operation rolled back")

// ErrWouldSleep is returned by StartSend and StartRecv for an operation
// with NoSleep that would have to wait: nothing was done.
var ErrWouldSleep = errors.New("msgengine: operation would sleep")

// Message is a received message: msgbuf's mtype and the text, already cut
// to the receiver's msgsz (MSG_NOERROR). msgrcv returns len(Data).
type Message struct {
	Type int64
	Data []byte
}

// SndOp is one msgsnd call.
type SndOp struct {
	MsqID int32
	// Type is msgbuf.mtype, read by the gateway before anything else
	// (ksys_msgsnd's get_user: its EFAULT comes first).
	Type int64
	// Data is the message text, len(Data) being msgsz. The engine copies
	// it into a text of the namespace (Resources.AllocText), unless Owned.
	Data []byte
	// Owned says that Data was allocated for this call by the engine's
	// Resources().AllocText: the engine takes it without a copy, and
	// keeps it in the queue or gives it back, whatever StartSend returns
	// (load_msg's buffer, read straight from the caller's memory).
	Owned bool
	Flags int // IPC_NOWAIT
	// Commit, when set, is called with the queue locked once the send is
	// certain and before the message becomes visible; the gateway answers
	// the trapped msgsnd there. If it returns false nothing has changed
	// and Msgsnd returns ErrNotDelivered. It must not call the engine.
	Commit func() bool
	// Done, for a sender that went to sleep (StartSend returned a Wait),
	// is called exactly once when the sleep ends other than by
	// Wait.Cancel: nil once the message was sent (Commit took it),
	// ErrNotDelivered when Commit refused, EIDRM, EACCES, EINTR (woken
	// with a signal pending). It runs with the queue locked and must not
	// call the engine.
	Done func(error)
	// Signalled, if set, reports whether the sleeping sender has a signal
	// pending: woken by room in the queue, it then fails with EINTR as in
	// do_msgsnd.
	Signalled func() bool
	// NoSleep makes StartSend fail with ErrWouldSleep, doing nothing,
	// where the sender would have to sleep.
	NoSleep bool

	// stored: the message was sent at once into the queue (not handed
	// to a receiver), which now holds its charge.
	stored bool
}

// RcvOp is one msgrcv call.
type RcvOp struct {
	MsqID int32
	Size  int64 // msgsz, the room for the text
	Type  int64 // msgtyp, or the index with MSG_COPY
	Flags int   // IPC_NOWAIT, MSG_NOERROR, MSG_EXCEPT, MSG_COPY
	// Thread is the calling thread's own pid handle (the task's struct
	// pid, whose number is the tid). Linux records it, not the thread
	// group, as msg_lrpid when a sender hands the message to this
	// receiver while it sleeps (pipelined_send's task_pid); a receive
	// that finds its message queued records the thread group
	// (task_tgid). Nil means the thread leads its group: Caller.Pid.
	Thread *ipcns.Pid
	// Commit, when set, is called with the queue locked and the message
	// chosen but not yet removed: the gateway writes m.Type and m.Data
	// into the caller's msgbuf and answers the trapped msgrcv there. m and
	// m.Data are valid only during the call. If it returns false the
	// message stays (or goes on to the next receiver, or into the queue,
	// exactly as if this receiver had not been waiting) and Msgrcv returns
	// ErrNotDelivered. It must not call the engine.
	Commit func(m *Message) bool
	// Discard says that Commit has copied the text out: the Message
	// returned, or given to Done, then has no Data. Otherwise it has a
	// copy of the text (the queue's text is given back as it leaves).
	Discard bool
	// Done, for a receiver that went to sleep (StartRecv returned a Wait),
	// is called exactly once when the sleep ends other than by
	// Wait.Cancel: with the message once one was handed to it (Commit
	// took it), ErrNotDelivered when Commit refused, EIDRM, E2BIG, EACCES.
	// It runs with the queue locked and must not call the engine.
	Done func(Message, error)
	// NoSleep makes StartRecv fail with ErrWouldSleep, doing nothing,
	// where the receiver would have to sleep.
	NoSleep bool
}

// MsqidDS is what IPC_STAT, MSG_STAT and MSG_STAT_ANY report, struct
// msqid64_ds. Lspid and Lrpid are already in the asking caller's pid
// namespace.
type MsqidDS struct {
	Perm                ipcns.Perm
	Stime, Rtime, Ctime int64  // seconds; 0 for never
	Cbytes, Qnum        uint64 // bytes and messages queued
	Qbytes              uint64 // the queue's byte limit
	Lspid, Lrpid        int32
}

// Msginfo is what IPC_INFO and MSG_INFO report, struct msginfo.
type Msginfo struct {
	Msgpool, Msgmap, Msgmax, Msgmnb, Msgmni, Msgssz, Msgtql int32
	Msgseg                                                  uint16
}
