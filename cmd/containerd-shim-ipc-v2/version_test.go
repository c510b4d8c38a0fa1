package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionArg(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"-v"}, true},
		{[]string{"--version"}, true},
		{[]string{"-version=true"}, true},
		{[]string{"-v=false"}, false},
		{[]string{"-namespace", "-v", "start"}, false}, // -v is the namespace
		{[]string{"-namespace", "k8s.io", "-v"}, true},
		{[]string{"-namespace", "k8s.io", "-id", "x", "start"}, false},
		{[]string{"start", "-v"}, false},
		{[]string{"-debug", "-v"}, true},
		{[]string{"-debug-socket", "-v", "start"}, false}, // -v is the socket path
		{nil, false},
	} {
		if got := versionArg(c.args); got != c.want {
			t.Errorf("versionArg(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestPrintVersion(t *testing.T) {
	bi := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/containerd-shim-ipc/containerd-shim-ipc", Version: "v0.0.0-20261203172000-a99e2be01234+dirty"},
		Deps: []*debug.Module{{Path: containerdModule, Version: "v2.3.7"}},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "a99e2be01234"},
			{Key: "vcs.time", Value: "2026-12-03T17:20:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	var b bytes.Buffer
	printVersion(&b, "containerd-shim-ipc-v2", bi, true)
	for _, want := range []string{
		"Version:    v0.0.0-20261203172000-a99e2be01234+dirty\n",
		"Revision:   a99e2be01234 (modified) 2026-12-03T17:20:00Z\n",
		"containerd: github.com/containerd/containerd/v2 v2.3.7 ",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
	version = "v0.1.0-3-gabcdef"
	defer func() { version = "" }()
	b.Reset()
	printVersion(&b, "containerd-shim-ipc-v2", bi, true)
	if !strings.Contains(b.String(), "Version:    v0.1.0-3-gabcdef\n") {
		t.Errorf("-ldflags version not printed:\n%s", b.String())
	}
}

func TestActionArg(t *testing.T) {
	for _, c := range []struct {
		args   []string
		action string
		ok     bool
	}{
		{nil, "", true},
		{[]string{"-namespace", "k8s.io", "-id", "x", "start"}, "start", true},
		{[]string{"-namespace=k8s.io", "-id=x", "delete"}, "delete", true},
		{[]string{"-debug", "-namespace", "k8s.io", "-address", "/run/c.sock"}, "", true},
		{[]string{"-namespace", "bogus"}, "", true}, // the namespace's name
		{[]string{"bogus"}, "bogus", false},
		{[]string{"-debug", "stop"}, "stop", false},
		{[]string{"--", "start"}, "start", true},
		{[]string{"--", "-x"}, "-x", false},
		{[]string{"-h", "bogus"}, "", true}, // containerd's flag parsing shows the help
		{[]string{"-debug", "--help"}, "", true},
	} {
		a, ok := actionArg(c.args)
		if a != c.action || ok != c.ok {
			t.Errorf("actionArg(%q) = %q, %v; want %q, %v", c.args, a, ok, c.action, c.ok)
		}
	}
}

// TestValuedFlags checks valuedFlags against the flags containerd's shim
// registers, as the binary's -h lists them ("-name string" takes a
// value): a containerd upgrade that adds one would make actionArg and
// versionArg read its value as an action or a flag.
func TestValuedFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "shim")
	// go test puts its go first in PATH.
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	got := map[string]bool{}
	// flag.PrintDefaults: "  -name" then " type" for any flag but a
	// boolean, then a tab and the usage (same line for one-letter names).
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)( \S+)?(\t.*)?$`).FindAllStringSubmatch(string(out), -1) {
		if m[2] != "" {
			got[m[1]] = true
		}
	}
	if len(got) == 0 {
		t.Fatalf("no flags with values in -h's output:\n%s", out)
	}
	for name := range got {
		if !valuedFlags[name] {
			t.Errorf("-%s takes a value but is not in valuedFlags", name)
		}
	}
	for name := range valuedFlags {
		if !got[name] {
			t.Errorf("valuedFlags has -%s, which -h does not list as taking a value", name)
		}
	}
	// An unknown action is named, with status 2.
	cmd := exec.Command(bin, "-namespace", "x", "bogus")
	msg, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(msg), `unknown action "bogus"`) {
		t.Errorf("shim -namespace x bogus: %v\n%s", err, msg)
	}
}
