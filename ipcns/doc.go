// Package ipcns holds what every System V IPC object of one IPC namespace
// shares, whatever its kind: the id registry (ipc/util.c's struct ipc_ids),
// the ipc_perm header and its permission rules, the namespace's limits
// (kernel.sem, kernel.msg*), caller credentials, and pid handles that are
// translated into the pid namespace of whoever asks.
//
// The package is pure mechanism: it never reads /proc and knows nothing of
// seccomp or of the ABI structs a process passes. The gateway builds a
// Caller from what it learns about a trapped thread; the engines
// (semengine, msgengine) take Callers and return plain Go values and
// syscall.Errno errors in the order Linux returns them.
package ipcns
