package tasktrace

import _ "unsafe" // for go:linkname

// Now returns the time on the clock that Event.Queued is read from
// (CLOCK_MONOTONIC, in nanoseconds), read as the Go runtime reads it:
// through the vDSO, without a system call.
func Now() int64 { return nanotime() }

// nanotime is the runtime's CLOCK_MONOTONIC reading on Linux, linked by
// name: a use the runtime keeps working (go.dev/issue/67401).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
