package kernelipc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const envActor = "KERNELIPC_ACTOR"

// bufArgBase marks an argument that stands for the address of a buffer.
const bufArgBase = 0x7eedface00000000

// BufArg returns the argument value that an actor replaces with the address
// of Call.Bufs[i].
func BufArg(i int) uint64 { return bufArgBase + uint64(i) }

// Call is one raw syscall for an actor to make.
type Call struct {
	Nr   uintptr
	Args [6]uint64
	// Bufs is memory the call points to (see BufArg); the actor returns
	// their contents after the call.
	Bufs [][]byte
	// Exit asks the actor to exit (status 0) instead of making a call.
	Exit bool
}

// Result is what a call returned.
type Result struct {
	Ret   int64
	Errno unix.Errno
	Bufs  [][]byte
}

type hello struct{ Pid, Tid int }

// ServeActorIfChild turns this process into an actor if it was started as
// one, and never returns then. Call it first in TestMain.
func ServeActorIfChild() {
	if os.Getenv(envActor) != "1" {
		return
	}
	runtime.LockOSThread()
	dec := json.NewDecoder(bufio.NewReader(os.Stdin))
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(hello{Pid: os.Getpid(), Tid: unix.Gettid()}); err != nil {
		os.Exit(2)
	}
	for {
		var c Call
		if err := dec.Decode(&c); err != nil || c.Exit {
			os.Exit(0)
		}
		if err := enc.Encode(do(&c)); err != nil {
			os.Exit(2)
		}
	}
}

func do(c *Call) Result {
	var a [6]uintptr
	for i, v := range c.Args {
		if v >= bufArgBase && v < bufArgBase+uint64(len(c.Bufs)) {
			if b := c.Bufs[v-bufArgBase]; len(b) > 0 {
				a[i] = uintptr(unsafe.Pointer(&b[0]))
			}
			continue
		}
		a[i] = uintptr(v)
	}
	r, _, e := unix.Syscall6(c.Nr, a[0], a[1], a[2], a[3], a[4], a[5])
	return Result{Ret: int64(r), Errno: e, Bufs: c.Bufs}
}

// Actor is a child process that makes IPC calls on request. It lives in the
// IPC namespace of the thread that started it.
type Actor struct {
	cmd     *exec.Cmd
	enc     *json.Encoder
	results chan Result
	nr      uintptr // the call in flight
	busy    bool    // a call is in flight
	// Pid and Tid identify the process and the thread that makes calls,
	// in the starting process's pid namespace; InnerPid is the pid in the
	// actor's own namespace.
	Pid, Tid, InnerPid int
}

// StartActor starts an actor. Call it from the thread whose namespace the
// actor must share (the one InFreshNamespace runs f on).
func StartActor() (*Actor, error) { return startActor(0) }

// StartActorInNewPidNS starts an actor that is pid 1 of a new pid
// namespace, a child of the caller's.
func StartActorInNewPidNS() (*Actor, error) { return startActor(syscall.CLONE_NEWPID) }

func startActor(cloneflags uintptr) (*Actor, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	// No asynchronous preemption: the runtime's SIGURG would interrupt a
	// semop sleeping in the kernel (EINTR, even under SA_RESTART), which
	// a scenario would take for the kernel's answer.
	cmd.Env = append(os.Environ(), envActor+"=1", "GODEBUG=asyncpreemptoff=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Cloneflags: cloneflags}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &Actor{cmd: cmd, enc: json.NewEncoder(in), results: make(chan Result, 1)}
	dec := json.NewDecoder(out)
	var h hello
	if err := dec.Decode(&h); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("actor did not start: %w", err)
	}
	// The actor reports its ids in its own pid namespace; the ones that
	// count here are those of this process's namespace.
	a.Pid, a.Tid, a.InnerPid = cmd.Process.Pid, h.Tid, h.Pid
	if cloneflags&syscall.CLONE_NEWPID != 0 {
		if a.Tid, err = outerTid(a.Pid, h.Tid); err != nil {
			a.Kill()
			return nil, err
		}
	}
	go func() {
		defer close(a.results)
		for {
			var r Result
			if dec.Decode(&r) != nil {
				return
			}
			a.results <- r
		}
	}()
	return a, nil
}

// outerTid finds the thread of process pid whose id in the process's own
// pid namespace is inner (the last NSpid field).
func outerTid(pid, inner int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == strconv.Itoa(inner) {
				return strconv.Atoi(e.Name())
			}
		}
	}
	return 0, fmt.Errorf("actor %d: no thread %d", pid, inner)
}

// Start sends c without waiting for its result.
func (a *Actor) Start(c Call) error {
	a.nr, a.busy = c.Nr, true
	return a.enc.Encode(c)
}

// Busy reports whether a call is in flight: started, and its result not
// yet taken.
func (a *Actor) Busy() bool { return a.busy }

// Settle waits until the call in flight has returned (true) or is asleep
// in the kernel (false).
func (a *Actor) Settle() (done bool, r Result, err error) { return a.SettleWithin(0) }

// SettleWithin is Settle for a caller that expects the call to return: a
// thread seen asleep in the call counts as asleep only once it has stayed
// so for patience. A kernel wakeup can be late: the waker hands it to
// another task's pending wake_q when the sleeper is already queued there
// (a thread of the actor releasing mmap_lock, say), and that task may be
// preempted for milliseconds on a loaded machine, so a sleeper the kernel
// has already woken can still show as asleep for that long.
func (a *Actor) SettleWithin(patience time.Duration) (done bool, r Result, err error) {
	deadline := time.Now().Add(10 * time.Second)
	var asleepSince time.Time
	for time.Now().Before(deadline) {
		select {
		case r, ok := <-a.results:
			if !ok {
				return false, r, fmt.Errorf("actor %d exited", a.Pid)
			}
			a.busy = false
			return true, r, nil
		default:
		}
		if !a.sleepingIn(a.nr) {
			asleepSince = time.Time{}
		} else if asleepSince.IsZero() {
			asleepSince = time.Now()
		}
		if !asleepSince.IsZero() && time.Since(asleepSince) >= patience {
			return false, Result{}, nil
		}
		time.Sleep(200 * time.Microsecond)
	}
	return false, Result{}, fmt.Errorf("actor %d neither returned nor slept in syscall %d", a.Pid, a.nr)
}

// sleepingIn reports whether the actor's thread sleeps in syscall nr.
func (a *Actor) sleepingIn(nr uintptr) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", a.Pid, a.Tid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || f[0] != strconv.Itoa(int(nr)) {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", a.Pid, a.Tid))
	if err != nil {
		return false
	}
	s := string(st)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'S'
}

// Result waits for the result of the call in flight.
func (a *Actor) Result() (Result, error) {
	select {
	case r, ok := <-a.results:
		if !ok {
			return r, fmt.Errorf("actor %d exited", a.Pid)
		}
		a.busy = false
		return r, nil
	case <-time.After(10 * time.Second):
		return Result{}, fmt.Errorf("actor %d: no result", a.Pid)
	}
}

// Do makes c and waits for its result.
func (a *Actor) Do(c Call) (Result, error) {
	if err := a.Start(c); err != nil {
		return Result{}, err
	}
	return a.Result()
}

// Exit asks the actor to exit and waits for it: its undo adjustments are
// applied by the kernel.
func (a *Actor) Exit() error {
	_ = a.enc.Encode(Call{Exit: true})
	return a.cmd.Wait()
}

// Kill sends SIGKILL to the actor and waits for it.
func (a *Actor) Kill() {
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
}

// Signal sends sig to the actor.
func (a *Actor) Signal(sig syscall.Signal) error { return a.cmd.Process.Signal(sig) }
