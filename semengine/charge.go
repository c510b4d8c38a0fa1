package semengine

import (
	"unsafe"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
)

// What a set and an undo entry are charged to the namespace's account
// (ipcns.Account), as Linux charges sem_array and sem_undo to the memory
// cgroup of the task that makes them: the engine's own structures, not
// the kernel's sizes.
var (
	setBase       = int64(unsafe.Sizeof(Set{}))
	semSize       = int64(unsafe.Sizeof(sem{}))
	undoEntryBase = int64(unsafe.Sizeof(undo.Entry{})) + 2*int64(unsafe.Sizeof(uintptr(0))) // and its slots in two lists
)

// setBytes is the charge of a set of nsems semaphores.
func setBytes(nsems int) int64 { return setBase + int64(nsems)*semSize }

// undoBytes is the charge of an undo entry for a set of nsems semaphores.
func undoBytes(nsems int) int64 { return undoEntryBase + 2*int64(nsems) }
