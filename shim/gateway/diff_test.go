package gateway_test

import (
	"strings"
	"testing"
)

// TestFirstDiff: a differential test names the first case that differs and
// does not cascade when one case has an extra line.
func TestFirstDiff(t *testing.T) {
	native := "semop, handler:\n  after signal: ncnt=0\n  final: 1\nsemop, ignored:\n  after signal: ncnt=1\n  final: 0\nmsgrcv, handler:\n  final: 1\n"
	trapped := "semop, handler:\n  after signal: ncnt=1\n  extra line\n  final: 1\nsemop, ignored:\n  after signal: ncnt=1\n  final: 0\nmsgrcv, handler:\n  final: 2\n"
	got := firstDiff(native, trapped)
	for _, want := range []string{`case 1 "semop, handler:" differs`, "extra line", `(1 later cases differ too: "msgrcv, handler:")`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "semop, ignored") {
		t.Errorf("an equal case reported:\n%s", got)
	}
	if got := firstDiff(native, native); got != "" {
		t.Errorf("equal outputs: %q", got)
	}
	// Flat outputs (one line per case): the first differing line, named.
	if got := firstDiff("a 1\nb 2\nc 3\n", "a 1\nb 5\nc 3\n"); !strings.Contains(got, `case 2 "b 2" differs`) {
		t.Errorf("flat: %s", got)
	}
}
