package gateway

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkSignalDeliverable is the read of /proc/TID/status that an
// answer in doubt adds (Request.await), against a bare getppid.
func BenchmarkSignalDeliverable(b *testing.B) {
	tid := unix.Gettid()
	b.Run("status", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if signalDeliverable(tid) {
				b.Fatal("a signal is deliverable to the benchmark's thread")
			}
		}
	})
	b.Run("getppid", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			unix.Getppid()
		}
	})
}
