// Package tasktrace reports, through eBPF programs on kernel tracepoints,
// the events of container tasks that decide how a trapped IPC call must be
// answered and that seccomp user notification does not report: a signal
// taken by a thread (with the handler's flags and the thread's registers
// at that moment, which say what its interrupted system call returned), a
// signal sent to a thread or a process, a thread's exit (and whether its
// process died with it), and an exec.
//
// # Why tracepoints
//
// A supervisor of seccomp notifications gets no event when a notification
// goes away (kernel/seccomp.c removes it when the waiting task is woken by
// a signal, before or after the supervisor read it), and a reply the
// kernel accepted can still be discarded when a signal wakes the task at
// the same instant. The kernel does tell, to a tracer: signal_deliver
// fires in the signalled thread, inside get_signal, before any handler
// runs or any restart is arranged, and the thread's saved user registers
// then hold the outcome of its last system call: ax is -ERESTARTSYS (512)
// and orig_ax the call's number when seccomp's wait was interrupted, or
// the supervisor's answer when the thread took it. sched_process_exit fires
// at the start of do_exit, before exit_sem, before files are closed and
// before the parent can wait: an exit seen here precedes everything that
// can observe it.
//
// Only tracepoints are used (classic tracepoints and BTF-typed raw
// tracepoints): fentry/fexit trampolines are refused on kernels in
// lockdown, as on the project's machines.
//
// # What is watched
//
// A task is watched when its IPC namespace's inode number was given to
// Watch: every program first reads current->nsproxy->ipc_ns->ns.inum (the
// offsets come from the running kernel's BTF) and drops the event unless
// the namespace is in the watched map. A thread that unshares or setns's
// into an unwatched IPC namespace is no longer reported; its calls are not
// the shim's either.
//
// # Cost
//
// Each program runs for every such event on the host (every signal
// delivery and generation, every task exit and exec), for every shim that
// loaded it: a map lookup after three pointer loads, ~100-200 ns, before
// it returns for tasks that are not watched.
//
// # Loading
//
// The programs need a few facts from the kernel's BTF: structure offsets
// and, for each tracepoint, the BTF type id of its btf_trace_<name>
// typedef (the program's attach target). Parsing the ~5 MB of BTF costs
// ~30-50 ms of CPU, at the moment a container starts. The first Tracer
// after boot does it and writes the facts to a file in
// DefaultCacheDir (cache.go), keyed by the boot id, kernel release, BTF
// size, the executable's Go build ID and what is asked; the next ones read
// the file and load the programs themselves (load.go: cilium/ebpf's
// loader would look the attach target up in the parsed BTF). Every
// attach is checked: the kernel reports which tracepoint a link is on,
// and a cached id that names another one is caught, the file removed and
// the BTF parsed. A file not root's (the effective user's), readable or
// writable by others, with a bad checksum or for another key is not used.
// A write keeps the eight newest files of the directory.
//
// # Reading
//
// Events go to one ring buffer per Tracer. Pending is two atomic loads on
// the ring's mapped pages (no system call), so a server can check for
// news before each call it serves; Drain reads what is there; Wait blocks
// (in Go's netpoller) until there is something. Drain and Wait must not
// run concurrently: the caller serializes them.
//
// The ring is shared by two classes of events of very different rates
// and costs when lost. A thread that signals itself without pause makes
// two signal events per signal and can fill any ring while the reader
// is away; a lost signal event makes an answer to that process inexact
// unless the reader knows whom it was about. A lost exit is worse: the
// gateway would never apply the process's SEM_UNDO or free what it held
// for it. So the signal programs drop their event once the data not yet
// consumed would leave less than a quarter of the ring free
// (bpf_ringbuf_query; each CPU may overshoot by one record), and keep the
// thread group it was about in a map (TakeLostSignals); that quarter is
// for exits and execs only, which are dropped only when they alone fill
// it (~1,480 unread). Lost counts the classes apart.
package tasktrace
