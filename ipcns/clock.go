package ipcns

import (
	"sync/atomic"
	"time"
)

// clockPeriod is how stale Now may be: about a kernel tick (the kernel's
// ktime_get_real_seconds is as old as the last timer tick).
const clockPeriod = 10 * time.Millisecond

// clock caches the time in seconds: reading the wall clock costs ~20-150 ns
// on these VMs, more than a whole semop, and the IPC timestamps (sem_otime,
// msg_stime, ...) have a resolution of one second.
var clock struct {
	sec     atomic.Int64
	used    atomic.Bool // Now ran since the last tick
	running atomic.Bool // a ticker keeps sec fresh
}

// Now returns the time in seconds since the epoch, at most clockPeriod old.
// A ticker refreshes it while it is in use and stops after a second
// without readers.
func Now() int64 {
	if clock.running.Load() {
		if !clock.used.Load() {
			clock.used.Store(true)
		}
		return clock.sec.Load()
	}
	t := time.Now().Unix()
	if clock.running.CompareAndSwap(false, true) {
		clock.sec.Store(t)
		go tick()
	}
	return t
}

func tick() {
	idle := 0
	for {
		time.Sleep(clockPeriod)
		clock.sec.Store(time.Now().Unix())
		if clock.used.Swap(false) {
			idle = 0
		} else if idle++; idle > int(time.Second/clockPeriod) {
			clock.running.Store(false)
			return
		}
	}
}
