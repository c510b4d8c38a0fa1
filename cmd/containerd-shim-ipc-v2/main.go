// Command containerd-shim-ipc-v2 is the containerd shim for runtime type
// io.containerd.ipc.v2: containerd's runc shim whose containers get System
// V semaphores and message queues served by the shim's engines through
// seccomp user notification.
//
// -v (or -version) prints the shim's own version and the containerd module
// it links, instead of containerd's shim's version line.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/containerd/containerd/v2/pkg/shim"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/memcharge"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/task"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == memcharge.HelperArg {
		// A ballast's helper, in a pod's memory cgroup (shim/memcharge).
		os.Exit(memcharge.HelperMain())
	}
	if versionArg(os.Args[1:]) {
		bi, ok := debug.ReadBuildInfo()
		printVersion(os.Stdout, filepath.Base(os.Args[0]), bi, ok)
		return
	}
	if a, ok := actionArg(os.Args[1:]); !ok {
		fmt.Fprintf(os.Stderr, "%s: unknown action %q: containerd runs this binary with start, delete or no action (serve); -h lists the flags\n",
			filepath.Base(os.Args[0]), a)
		os.Exit(2)
	}
	flag.Usage = usage
	task.Register()
	ver, rev, ctrd := buildVersion(debug.ReadBuildInfo())
	shim.RunShim(context.Background(), task.NewManager(task.Version{Version: ver, Revision: rev, Containerd: ctrd}))
}

// usage is -h's text: containerd's shim registers the flags (and leaves
// -v without a description); this says what the binary is first.
func usage() {
	if f := flag.Lookup("v"); f != nil && f.Usage == "" {
		f.Usage = "same as -version"
	}
	w := flag.CommandLine.Output()
	fmt.Fprintf(w, "Usage of %s:\n", filepath.Base(os.Args[0]))
	fmt.Fprintf(w, "containerd starts this shim for runtime type io.containerd.ipc.v2 (see README.md); it is not run by hand.\n")
	flag.PrintDefaults()
}
