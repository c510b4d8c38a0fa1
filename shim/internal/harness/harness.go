// Package harness starts real processes under the IPC notify filter and
// hands the filter's listener fd to a listenerPath socket exactly as runc
// does (one connection, JSON ContainerProcessState + SCM_RIGHTS, the
// connection left open), so that gateway tests run unmodified programs
// without runc or containerd.
//
// The child is a re-exec of the test binary: TestMain calls MaybeChild
// first. The child installs the filter (ipcfilter.Install), sends the
// listener fd, closes its own copy and then execs the target program, or
// runs a Go function registered with Register.
package harness

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"unsafe"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/ipcfilter"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/listener"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/memcharge"
	"golang.org/x/sys/unix"
)

const (
	envMode   = "SHIM_HARNESS_MODE" // "trap" or "native"
	envSocket = "SHIM_HARNESS_SOCKET"
	envArgv   = "SHIM_HARNESS_ARGV"
	goPrefix  = "go:"
)

var funcs = map[string]func(args []string) int{}

// Register makes f runnable as the target "go:name" (see Command). Call it
// from an init function or TestMain, before MaybeChild. f's result is the
// exit status.
func Register(name string, f func(args []string) int) { funcs[name] = f }

// MaybeChild turns the process into a harness child if it was started as
// one, and never returns then. Call it first in TestMain.
func MaybeChild() {
	if len(os.Args) > 1 && os.Args[1] == memcharge.HelperArg {
		os.Exit(memcharge.HelperMain()) // podBallast's helper
	}
	mode := os.Getenv(envMode)
	if mode == "" {
		return
	}
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv(envArgv)), &argv); err != nil || len(argv) == 0 {
		fmt.Fprintf(os.Stderr, "harness: bad %s: %v\n", envArgv, err)
		os.Exit(120)
	}
	os.Unsetenv(envMode)
	os.Unsetenv(envArgv)
	if mode == "trap" {
		if err := trap(os.Getenv(envSocket)); err != nil {
			fmt.Fprintf(os.Stderr, "harness: %v\n", err)
			os.Exit(121)
		}
	}
	os.Unsetenv(envSocket)
	if name, ok := strings.CutPrefix(argv[0], goPrefix); ok {
		f := funcs[name]
		if f == nil {
			fmt.Fprintf(os.Stderr, "harness: no function %q\n", name)
			os.Exit(122)
		}
		os.Exit(f(argv[1:]))
	}
	path, err := exec.LookPath(argv[0])
	if err == nil {
		err = syscall.Exec(path, argv, os.Environ())
	}
	fmt.Fprintf(os.Stderr, "harness: exec %s: %v\n", argv[0], err)
	os.Exit(123)
}

// trap installs the filter and sends its listener fd to socket as runc
// does.
func trap(socket string) error {
	fd, err := ipcfilter.Install()
	if err != nil {
		return err
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return fmt.Errorf("dial listener: %w", err)
	}
	pid := os.Getpid()
	st := &listener.ContainerProcessState{
		Version: "1.0.2-dev",
		Fds:     []string{listener.SeccompFdName},
		Pid:     pid,
		State:   listener.State{Version: "1.0.2-dev", ID: "harness", Status: "creating", Pid: pid, Bundle: "/"},
	}
	if err := listener.Send(c, st, fd); err != nil {
		return err
	}
	// The traced process must not keep the listener: it could answer
	// its own calls.
	if err := unix.Close(fd); err != nil {
		return err
	}
	// Keep the connection open across exec, as runc does, so that the
	// server cannot rely on EOF.
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		_, cerr = unix.FcntlInt(fd, unix.F_SETFD, 0)
	}); err != nil {
		return err
	}
	return cerr
}

// Command returns a command that runs argv under the IPC notify filter,
// sending the listener fd to the listenerPath socket. argv[0] is a program
// (looked up in PATH) or "go:name" for a function registered with
// Register. The process is killed if the test process dies.
//
// Like a container's, the process has an IPC namespace of its own (the
// engines serve its calls; the gateway has the kernel report the
// namespace's task events), so it needs CAP_SYS_ADMIN.
func Command(socket string, argv ...string) *exec.Cmd {
	cmd := command("trap", socket, argv)
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWIPC
	return cmd
}

// NativeCommand returns a command that runs argv without a filter, in a
// fresh kernel IPC namespace (unshare -i), as the reference for
// differential tests. It needs CAP_SYS_ADMIN.
func NativeCommand(argv ...string) *exec.Cmd {
	cmd := command("native", "", argv)
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWIPC
	return cmd
}

func command(mode, socket string, argv []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	b, _ := json.Marshal(argv)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envMode+"="+mode, envSocket+"="+socket, envArgv+"="+string(b))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Supported reports why seccomp user notification with a listener cannot
// be used here, or "" if it can: tests skip when it is not empty.
func Supported() string {
	if err := unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fmt.Sprintf("seccomp unavailable: %v", err)
	}
	var s [3]uint16
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_NOTIF_SIZES, 0, uintptr(unsafe.Pointer(&s)))
	if errno != 0 {
		return fmt.Sprintf("seccomp user notification unavailable: %v", errno)
	}
	return ""
}
