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
		if valuedFlags[name] {
			i++
		}
	}
	return false
}

// valuedFlags are containerd's shim flags that take a value (the rest
// are booleans); TestValuedFlags checks them against the binary's -h.
var valuedFlags = map[string]bool{"namespace": true, "id": true, "address": true,
	"publish-binary": true, "bundle": true, "socket": true, "debug-socket": true}

// actions are what containerd runs the shim binary with, the first
// argument after the flags: start (fork a shim server and print its
// address), delete (clean up after a dead shim), none (be the server).
var actions = map[string]bool{"": true, "start": true, "delete": true}

// actionArg returns the action args (os.Args[1:]) name, as containerd's
// shim parses them: the first argument that is neither a flag nor a
// flag's value. ok is false for an action containerd's shim does not
// know, which it would take as "serve" and fail on with a message about
// something else.
func actionArg(args []string) (action string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				action = args[i+1]
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			action = a
			break
		}
		name := strings.TrimLeft(a, "-")
		if name == "h" || name == "help" {
			return "", true // flag.Parse shows the help and exits
		}
		if !strings.Contains(name, "=") && valuedFlags[name] {
			i++
		}
	}
	return action, actions[action]
}

// printVersion writes the shim's version, its VCS revision, the containerd
// module it links and the Go version, in the layout of containerd's shims.
func printVersion(w io.Writer, name string, bi *debug.BuildInfo, ok bool) {
	ver, rev, ctrd := buildVersion(bi, ok)
	fmt.Fprintf(w, "%s:\n", name)
	fmt.Fprintf(w, "  Version:    %s\n", ver)
	if rev != "" {
		fmt.Fprintf(w, "  Revision:   %s\n", rev)
	}
	fmt.Fprintf(w, "  containerd: %s %s (runc shim and task API linked in)\n", containerdModule, ctrd)
	fmt.Fprintf(w, "  Go version: %s\n", runtime.Version())
}

// buildVersion returns the shim's version (version, else the module's),
// its VCS revision ("" if not stamped) and the version of the containerd
// module it links, from the build's info (ok: debug.ReadBuildInfo's).
func buildVersion(bi *debug.BuildInfo, ok bool) (ver, rev, ctrd string) {
	ver, ctrd = version, "unknown"
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
	return ver, rev, ctrd
}
