// Package msgengine is a userspace System V message queue implementation
// (msgget, msgsnd, msgrcv, msgctl) that a process cannot tell apart from
// Linux 6.x's ipc/msg.c: same results, same errnos in the same order, same
// msqid_ds and msginfo fields, same wakeup rules. It is pure mechanism on
// ipcns's ids, permissions and pid handles; the gateway does the ABI
// marshalling (reading msgbuf, writing msqid64_ds) and reports signals by
// cancelling a call's context.
//
// # Objects
//
// An Engine is the message queues of one IPC namespace. A Queue is one
// struct msg_queue. Its messages are kept per type: each type present has a
// FIFO list, and two small heaps over those lists give the first message of
// the queue (lowest sequence number, for msgtyp 0 and MSG_EXCEPT) and the
// lowest type (for msgtyp < 0) without scanning the messages, where Linux's
// find_msg walks the whole queue. A queued message costs a 32-byte header
// besides its text.
//
// # Locking rules
//
// The rules, as ipc/msg.c's, in one place:
//
//   - Engine: the Registry (ipcns) serialises msgget and removal with its
//     own mutex; Lookup takes no lock. Engine.reserved is atomic and is
//     touched only when a queue's memory reservation grows past or shrinks
//     back to its baseline (see reserve.go), never per message of a queue
//     within msgmnb bytes.
//   - Queue.mu protects everything in the Queue but the Header's perm and
//     deleted flag (atomics written with mu held) and the qnum/cbytes
//     atomics, which are written with mu held and read without it by
//     MSG_INFO. Different queues share no lock and no written cache line.
//   - A waiter (a sleeping msgsnd or msgrcv, struct msg_sender /
//     msg_receiver) is protected by the lock of the queue it sleeps on,
//     except its wake channel. A waker that finishes a waiter (hands it a
//     message, completes its send, fails it with EIDRM, E2BIG, EACCES or
//     EINTR) sets its status with mu held, unlinks it and sends on wake.
//     The sleeper, on cancellation, takes mu and either finds its status
//     set (then it drains wake and returns that result) or unlinks itself
//     and returns EINTR. So a message is either delivered to exactly one
//     receiver or is still queued: never both, never neither.
//   - Commit hooks run with mu held. They must not call into the engine.
//     Whatever a Commit returns false for is undone before mu is released.
//   - Lock order: Registry's mutex may be taken with a Queue's mu held (on
//     removal); never the reverse. No code holds two Queue locks. A
//     Queue's mu is held across Uncharge and FreeText, which take the
//     namespace's account locks (ipcns.Resources, then memcharge's
//     Ballast.mu: a punch or munmap, or a wait for a helper round trip);
//     those never call back into the engine.
//
// # Delivery and Commit
//
// Linux wakes a sleeping receiver with the message already taken
// (pipelined_send) and a sleeping sender to retry. This engine completes
// both under the waker's lock instead: a sleeping sender whose message now
// fits is sent on its behalf, in the order the woken tasks would run, and
// a sleeping receiver is handed the message. Each completion first calls
// the waiter's Commit (the gateway writes the message into the caller's
// memory and answers the trapped syscall there); if Commit returns false
// the completion is undone exactly and the waiter returns ErrNotDelivered:
// a refused send leaves the queue as it was, a refused pipelined message
// goes on to the next matching receiver or to the queue, and a refused
// direct receive leaves the message in place.
package msgengine
