package main

import (
	"bytes"
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
