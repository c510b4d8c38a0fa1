package tasktrace

import "testing"

// TestParseMonotonicOffset: the offset the vDSO adds in a time namespace
// is taken off Now, so that it reads bpf_ktime_get_ns's clock.
func TestParseMonotonicOffset(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"monotonic           0         0\nboottime            0         0\n", 0},
		{"monotonic        -100 500000000\nboottime 7 0\n", -99_500_000_000},
		{"boottime 3 0\nmonotonic 2 1\n", 2_000_000_001},
		{"", 0},
		{"monotonic x 0\n", 0},
	} {
		if got := parseMonotonicOffset([]byte(c.in)); got != c.want {
			t.Errorf("parseMonotonicOffset(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}
