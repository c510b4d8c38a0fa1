package msgengine

// The engine's memory bound. Linux bounds a queue's payload by q_qbytes,
// which only CAP_SYS_RESOURCE may raise above msgmnb. For the shim, whose
// memory every container shares, the payload of a whole namespace is also
// bounded, by msgmni × msgmnb bytes, whatever callers do: every queue
// holds a reservation from a namespace-wide budget of that size and keeps
// its payload within it.
//
// A queue takes min(qbytes, msgmnb) bytes the first time it needs room and
// keeps them, so queues within msgmnb touch the shared counter once in
// their life, never per message. Only a queue whose qbytes was raised
// above msgmnb grows its reservation past that baseline, and gives the
// excess back as it drains. msgmni queues of msgmnb bytes fit the budget
// exactly, so the bound never refuses what Linux with default qbytes
// would accept; it can refuse a send (as "queue full": EAGAIN or sleep)
// only after privileged callers raised qbytes and filled queues beyond
// msgmnb, and a sender so refused is woken by activity on its own queue
// only.

// baselineLocked is the reservation a queue keeps while it has messages
// or has had them.
func (q *Queue) baselineLocked() int64 {
	mnb := int64(q.e.ns.Limits().MsgMNB)
	if q.qbytes < uint64(mnb) {
		return int64(q.qbytes)
	}
	return mnb
}

// reserveLocked makes the reservation cover need bytes of payload and
// reports whether it could.
func (q *Queue) reserveLocked(need int64) bool {
	if need <= q.reserved {
		return true
	}
	want := max(need, q.baselineLocked())
	lim := q.e.ns.Limits()
	budget := int64(lim.MsgMNI) * int64(lim.MsgMNB)
	d := want - q.reserved
	for {
		cur := q.e.reserved.Load()
		if cur+d > budget {
			return false
		}
		if q.e.reserved.CompareAndSwap(cur, cur+d) {
			q.reserved = want
			return true
		}
	}
}

// shrinkLocked gives back the part of the reservation above both the
// payload and the baseline.
func (q *Queue) shrinkLocked() {
	keep := max(q.cbytes.Load(), q.baselineLocked())
	if q.reserved > keep {
		q.e.reserved.Add(keep - q.reserved)
		q.reserved = keep
	}
}

// unreserveLocked gives back the whole reservation (the queue is gone).
func (q *Queue) unreserveLocked() {
	q.e.reserved.Add(-q.reserved)
	q.reserved = 0
}
