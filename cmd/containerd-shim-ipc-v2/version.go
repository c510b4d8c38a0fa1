package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is the shim's own version, stamped by `make shim` with
// -ldflags "-X main.version=$(git describe --tags --always --dirty)".
// Empty in a plain `go build`: the build's module version and VCS
// revision (debug.ReadBuildInfo) stand in.
var version string

// containerdModule is the module whose runc shim this binary links.
const containerdModule = "github.com/containerd/containerd/v2"

// versionArg reports whether args (os.Args[1:]) ask for the version the way
// containerd's shim flags do (-v, -version, with one or two dashes), before
// the first non-flag argument and not as another flag's value.
func versionArg(args []string) bool {
	valued := map[string]bool{"namespace": true, "id": true, "address": true,
		"publish-binary": true, "bundle": true, "socket": true, "debug-socket": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			return false
		}
		name := strings.TrimLeft(a, "-")
		if k := strings.IndexByte(name, '='); k >= 0 {
			if name[:k] == "v" || name[:k] == "version" {
				return name[k+1:] == "true" || name[k+1:] == "1"
			}
			continue
		}
		if name == "v" || name == "version" {
			return true
		}
		if valued[name] {
			i++
		}
	}
	return false
}

// printVersion writes the shim's version, its VCS revision, the containerd
// module it links and the Go version, in the layout of containerd's shims.
func printVersion(w io.Writer, name string, bi *debug.BuildInfo, ok bool) {
	ver, rev, ctrd := version, "", "unknown"
	if ok {
		if ver == "" {
			ver = bi.Main.Version // a pseudo-version from the VCS, or "(devel)"
		}
		var revision, when, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
		if revision != "" {
			rev = revision + modified
			if when != "" {
				rev += " " + when
			}
		}
		for _, d := range bi.Deps {
			if d.Path == containerdModule {
				ctrd = d.Version
				if d.Replace != nil {
					ctrd += " => " + d.Replace.Path + " " + d.Replace.Version
				}
			}
		}
	}
	if ver == "" {
		ver = "unknown"
	}
	fmt.Fprintf(w, "%s:\n", name)
	fmt.Fprintf(w, "  Version:    %s\n", ver)
	if rev != "" {
		fmt.Fprintf(w, "  Revision:   %s\n", rev)
	}
	fmt.Fprintf(w, "  containerd: %s %s (runc shim and task API linked in)\n", containerdModule, ctrd)
	fmt.Fprintf(w, "  Go version: %s\n", runtime.Version())
}
