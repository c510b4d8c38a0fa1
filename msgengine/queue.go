package msgengine

import (
	"sync"
	"sync/atomic"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// Queue is one message queue, struct msg_queue.
type Queue struct {
	ipcns.Header
	e *Engine

	// mu protects every field below but the atomics; see doc.go.
	mu sync.Mutex
	// qnum and cbytes are q_qnum and q_cbytes. They are written with mu
	// held and read without it by MSG_INFO, which sums them over the
	// queues instead of keeping a namespace-wide counter.
	qnum, cbytes atomic.Int64
	qbytes       uint64 // q_qbytes: the byte limit (and message limit)
	// reserved is the payload room this queue holds from the engine's
	// memory budget (reserve.go); cbytes <= reserved.
	reserved            int64
	stime, rtime, ctime int64
	lspid, lrpid        *ipcns.Pid
	msgs                store
	senders             waitList // q_senders
	receivers           waitList // q_receivers
}

func newQueue(e *Engine, lim *ipcns.Limits) *Queue {
	q := &Queue{e: e, qbytes: uint64(lim.MsgMNB), ctime: now()}
	q.msgs.init()
	return q
}

// fitsLimit is msg_fits_inqueue: the message fits when the bytes and the
// message count stay within q_qbytes.
func (q *Queue) fitsLimit(msgsz int64) bool {
	return uint64(msgsz)+uint64(q.cbytes.Load()) <= q.qbytes &&
		1+uint64(q.qnum.Load()) <= q.qbytes
}

// fitsLocked is fitsLimit and, for the engine's memory bound, room in the
// queue's reservation.
func (q *Queue) fitsLocked(msgsz int64) bool {
	return q.fitsLimit(msgsz) && q.reserveLocked(q.cbytes.Load()+msgsz)
}

// now returns the time in seconds, as ktime_get_real_seconds.
func now() int64 { return ipcns.Now() }
