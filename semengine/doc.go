// Package semengine is a userspace System V semaphore implementation that
// a process cannot tell apart from Linux's ipc/sem.c: the same ids, the
// same errno for every input and in the same order, the same wakeup order,
// GETNCNT/GETZCNT, sempid, otime/ctime and SEM_UNDO rules. The kernel is
// the oracle: the package's differential tests run every scenario on the
// kernel, in a fresh IPC namespace, and on the engine, and compare.
//
// An Engine holds the semaphore sets of one IPC namespace. Calls take an
// ipcns.Caller and return plain values and syscall.Errno errors; reading
// and writing the caller's memory is the gateway's business.
//
// # Locking and memory ordering
//
// This is the one place that states the rules; code that relies on them
// says so briefly.
//
// Objects. Each Set has a whole-set lock (Set.mu) and each semaphore a
// lock of its own (sem.mu), in a 64-byte sem that shares its cache line
// with nothing else. The registry has its own lock for creation, removal
// and key lookup; lookup by id takes no lock at all (ipcns.Registry).
//
// Two modes. A Set is in simple mode while useGlobal == 0. Then a simple
// operation (a semop with one sembuf) takes only its semaphore's lock, and
// that lock protects the semaphore's value, sempid, otime and its two
// queues (alter: sleeping decrements; zero: sleeping waits-for-zero).
// Simple operations on different semaphores therefore run in parallel.
// Everything else - a complex operation (several sembufs), semctl, undo at
// exit, IPC_RMID - takes the whole-set lock with lockAll, which puts the
// set in complex mode: it stores useGlobal = hysteresis and then takes and
// releases every semaphore's lock once. While useGlobal != 0, simple
// operations take the whole-set lock too, and the whole-set lock protects
// every semaphore's fields, the set's queues, complexCount, ctime and the
// undo chain.
//
// Why that is enough (the kernel's sem_lock/complexmode_enter argument):
// the simple path locks sem.mu and then loads useGlobal; the complex path
// stores useGlobal and then locks each sem.mu. Go's atomics are
// sequentially consistent, so if the simple path loaded 0, its load came
// before the store, and the complex path's Lock of that sem.mu comes after
// the simple path's Lock and waits for its Unlock: the two never run
// together. If the simple path loads non-zero it drops sem.mu and takes
// the whole-set lock, rechecking useGlobal under it in case complex mode
// ended while it waited.
//
// Hysteresis. Each release of the whole-set lock with no complex operation
// queued decrements useGlobal; at 0 the set is back in simple mode. A set
// with occasional complex operations thus stays in complex mode for a few
// operations instead of paying the lock-all sweep each time
// (USE_GLOBAL_LOCK_HYSTERESIS). While a complex operation sleeps
// (complexCount > 0) the set cannot leave complex mode.
//
// Queues. In simple mode only simple operations sleep, on their
// semaphore's queues; the set's queues are empty. When the first complex
// operation must sleep, mergeQueues moves every sleeping simple decrement
// to the set's alter queue (the kernel's merge_queues, order included),
// and until complexCount drops to 0 every new sleeping decrement joins the
// set's queue too, so that competing operations are retried in arrival
// order. When the whole-set lock is released with no complex operation
// left, unmergeQueues moves them back. Waits-for-zero stay on their
// semaphore's zero queue; complex waits-for-zero use the set's.
//
// Wakeups. The operation that changes values retries the sleepers its
// change may release, with the same lock held, exactly as do_smart_update
// does: waits-for-zero of the semaphores that reached 0 first, then the
// alter queues in order, each sleeper that can now proceed completing
// (its operation is performed by the waker), one that cannot not holding
// back those behind it, and a rescan after a completed complex operation.
// A new operation that can proceed never waits behind sleepers. The waker
// sets the sleeper's status and sends on its wake channel while holding
// the lock that protects the sleeper's queue; the sleeper reads status
// after receiving, or under that lock.
//
// Sleeping and cancellation. A sleeper whose context is cancelled (the
// gateway's signal) or whose timeout fires takes the lock again with
// lockFor: if a waker completed it meanwhile, the completion stands and is
// returned; otherwise it unlinks itself and returns EINTR or EAGAIN. A unit
// is thus either given to exactly one sleeper or left in the semaphore.
//
// Delivery. Op.Commit runs with the lock still held, right after an
// operation is performed, before anyone else can see its effect. If it
// fails, the values, adjustments and sempids are put back as they were,
// which is exact precisely because nobody else ran in between; for a
// woken sleeper the waker then goes on as if the sleeper had left on a
// signal. Commit must not call back into the engine.
//
// Undo. A process's undo.List has a mutex for its entry list. An entry's
// adjustments are protected like the values they belong to: Adj[i] by
// semaphore i's lock or the whole-set lock. Entries are attached and
// detached with the whole-set lock held.
//
// Lock order: Set.mu, then sem.mu (lockAll's sweep and lockFor's fallback
// take them in that order only); Set.mu, then undo.List.mu; Set.mu, then
// the registry's lock (IPC_RMID). Commit runs under set locks and must
// take none of them.
package semengine
