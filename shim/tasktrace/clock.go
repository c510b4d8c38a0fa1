package tasktrace

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	_ "unsafe" // for go:linkname
)

// Now returns the time on the clock that Event.Queued is read from
// (the host's CLOCK_MONOTONIC, in nanoseconds), read as the Go runtime
// reads it: through the vDSO, without a system call.
func Now() int64 { return nanotime() - monotonicOffset }

// nanotime is the runtime's CLOCK_MONOTONIC reading on Linux, linked by
// name: a use the runtime keeps working (go.dev/issue/67401).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// monotonicOffset is the CLOCK_MONOTONIC offset of the shim's time
// namespace (time_namespaces(7)), read at start (a process's namespace
// for time is fixed once it runs): the vDSO adds it, bpf_ktime_get_ns
// does not. 0 in the initial namespace, or without CONFIG_TIME_NS.
var monotonicOffset = readMonotonicOffset()

func readMonotonicOffset() int64 {
	b, err := os.ReadFile("/proc/self/timens_offsets")
	if err != nil {
		return 0
	}
	return parseMonotonicOffset(b)
}

// parseMonotonicOffset reads the monotonic line of a timens_offsets
// file ("monotonic <secs> <nanosecs>"), in nanoseconds.
func parseMonotonicOffset(b []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) != 3 || string(f[0]) != "monotonic" {
			continue
		}
		sec, err1 := strconv.ParseInt(string(f[1]), 10, 64)
		nsec, err2 := strconv.ParseInt(string(f[2]), 10, 64)
		if err1 != nil || err2 != nil {
			return 0
		}
		return sec*1e9 + nsec
	}
	return 0
}
