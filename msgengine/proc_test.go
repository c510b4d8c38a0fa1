package msgengine

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// normalizeProc checks that every row of a /proc/sysvipc/msg text is
// exactly procFormat applied to its own fields (so the kernel's rows check
// the format string, and the engine's rows check that the engine uses it),
// then returns the text with pids named and times shown as 0 or T, for
// comparing the two sides.
func normalizeProc(text string, pidName func(int32) string) string {
	lines := strings.SplitAfter(text, "\n")
	if lines[0] != procHeader {
		panic(fmt.Sprintf("header %q", lines[0]))
	}
	out := []string{"header ok"}
	for _, line := range lines[1:] {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 14 {
			panic(fmt.Sprintf("row %q", line))
		}
		v := make([]any, 14)
		for i, s := range f {
			base := 10
			if i == 2 {
				base = 8
			}
			n, err := strconv.ParseInt(s, base, 64)
			if err != nil {
				panic(fmt.Sprintf("row %q: %v", line, err))
			}
			v[i] = n
		}
		//lint:ignore SA5009 v holds one value per verb of procFormat, spread
		if again := fmt.Sprintf(procFormat, v...); again != line {
			panic(fmt.Sprintf("row %q is not procFormat: %q", line, again))
		}
		for _, i := range []int{5, 6} {
			f[i] = pidName(int32(v[i].(int64)))
		}
		for _, i := range []int{11, 12, 13} {
			if f[i] != "0" {
				f[i] = "T"
			}
		}
		out = append(out, strings.Join(f, " "))
	}
	return strings.Join(out, "\n")
}

// TestProcSysvipc: /proc/sysvipc/msg as the kernel writes it.
func TestProcSysvipc(t *testing.T) {
	diff(t, func(s *env) {
		s.logf("empty: %s", s.b.procFile())
		a := s.get(0, 0x4321, ipcns.IPCCreat|0o640)
		b := s.get(0, ipcns.IPCPrivate, 0o600)
		s.snd(0, a, 5, "hello", 0)
		s.snd(1, a, 6, "world!", 0)
		s.rcv(2, a, 100, 6, 0)
		s.set(0, b, 1234, 5678, 0o604, 100)
		s.logf("two:\n%s", s.b.procFile())
	})
}
