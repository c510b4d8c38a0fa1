package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// vehiclePeer is testdata/vehiclepeer.c running in an IPC namespace of
// its own: the thread a vehicle is made for.
type vehiclePeer struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	task *Task
}

func startVehiclePeer(t *testing.T) *vehiclePeer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (unshare -i, setns)")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	bin := filepath.Join(t.TempDir(), "vehiclepeer")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", bin, "testdata/vehiclepeer.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command("unshare", "-i", bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &vehiclePeer{cmd: cmd, in: in, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	if line := p.line(t); line != "ready" {
		t.Fatalf("peer said %q", line)
	}
	ino, err := nsInode("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/ipc")
	if err != nil {
		t.Fatal(err)
	}
	if own, _ := ownIPCNS(); ino == own {
		t.Fatal("the peer shares the test's IPC namespace")
	}
	p.task = &Task{Tid: cmd.Process.Pid, IPCNS: ino}
	return p
}

func (p *vehiclePeer) line(t *testing.T) string {
	t.Helper()
	s, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("peer: %v", err)
	}
	return strings.TrimSuffix(s, "\n")
}

// rcv makes the peer call msgrcv natively and returns what it printed.
func (p *vehiclePeer) rcv(t *testing.T, id int32, size, typ int64, flg int) string {
	t.Helper()
	fmt.Fprintf(p.in, "%d %d %d %d\n", id, size, typ, flg)
	return p.line(t)
}

// inNS runs f on a thread that joined the peer's IPC namespace (and
// ends with f), with that namespace's vehicle state.
func inNS(t *testing.T, p *vehiclePeer, vns *vehicleNS, f func(v *vehicleNS)) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends here
		fd, err := openIPCNS(p.task.Tid, p.task.IPCNS)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWIPC)
			unix.Close(fd)
		}
		if err != nil {
			done <- err
			return
		}
		f(vns)
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestVehicle makes vehicles in a peer's IPC namespace: the peer's
// native msgrcv, with the id the engine's queue has, finds the message
// and empties the queue; a queue the peer left is still full; a vehicle
// carries a message larger than the namespace's msgmax and msgmnb; one
// whose index another queue holds is not made; a removed vehicle is gone,
// and so is one left behind, by the sweep before a namespace's first
// vehicle.
func TestVehicle(t *testing.T) {
	p := startVehiclePeer(t)
	const id = 5 + 3*32768
	vns := &vehicleNS{}
	full := func(id int32) bool {
		var f bool
		var err error
		inNS(t, p, vns, func(*vehicleNS) { f, err = vehicleFull(id) })
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	inNS(t, p, vns, func(v *vehicleNS) {
		if err := v.make(id, 7, []byte("carried")); err != nil {
			t.Error(err)
		}
		// Another vehicle for the same index while this one stands.
		if err := v.make(5+4*32768, 1, []byte("x")); !errors.Is(err, errNoVehicle) {
			t.Errorf("second vehicle on index 5: %v, want errNoVehicle", err)
		}
	})
	if t.Failed() {
		return
	}
	if !full(id) {
		t.Fatal("a new vehicle is empty")
	}
	// A selector the message does not meet leaves it (the engine never
	// asks that of a vehicle; here it shows the peer's call is native).
	if got, want := p.rcv(t, id, 64, 8, unix.IPC_NOWAIT), "ret=-1 errno=ENOMSG type=0 len=0 text="; got != want {
		t.Fatalf("msgrcv type 8: %q, want %q", got, want)
	}
	if !full(id) {
		t.Fatal("a msgrcv that took nothing emptied the vehicle")
	}
	if got, want := p.rcv(t, id, 64, 0, 0), "ret=7 errno=0 type=7 len=7 text=carried"; got != want {
		t.Fatalf("msgrcv: %q, want %q", got, want)
	}
	if full(id) {
		t.Fatal("the vehicle is full after the peer's msgrcv")
	}
	inNS(t, p, vns, func(*vehicleNS) { rmidVehicle(id) })
	if got, want := p.rcv(t, id, 64, 0, unix.IPC_NOWAIT), "ret=-1 errno=EINVAL type=0 len=0 text="; got != want {
		t.Fatalf("msgrcv on a removed vehicle: %q, want %q", got, want)
	}

	// Larger than the namespace's msgmax (8192) and msgmnb (16384).
	big := bytes.Repeat([]byte("b"), 20000)
	inNS(t, p, vns, func(v *vehicleNS) {
		if err := v.make(9, 3, big); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		return
	}
	if got, want := p.rcv(t, 9, 65536, 0, 0), "ret=20000 errno=0 type=3 len=20000 text=bbbbbbbb"; got != want {
		t.Fatalf("msgrcv of a 20000-byte message: %q, want %q", got, want)
	}

	// A vehicle left behind (its shim crashed) is swept before a new
	// shim's first vehicle in the namespace.
	inNS(t, p, vns, func(v *vehicleNS) {
		if err := v.make(11, 1, []byte("left")); err != nil {
			t.Error(err)
		}
	})
	inNS(t, p, vns, func(*vehicleNS) { sweep() })
	if got, want := p.rcv(t, 11, 64, 0, unix.IPC_NOWAIT), "ret=-1 errno=EINVAL type=0 len=0 text="; got != want {
		t.Fatalf("msgrcv on a swept vehicle: %q, want %q", got, want)
	}
}

// TestAboutToRun reads a thread's state as vehicleFate does: a thread
// that runs may still take its answer; one that sleeps, is stopped or
// is dead cannot.
func TestAboutToRun(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if !aboutToRun(unix.Gettid()) {
		t.Fatal("the running test thread: not about to run")
	}
	p := startVehiclePeer(t)
	pid := p.cmd.Process.Pid
	for procState(t, pid) != 'S' {
		runtime.Gosched() // the peer goes on to read(2) after its ready line
	}
	if aboutToRun(pid) {
		t.Fatal("a peer asleep in read(2): about to run")
	}
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for procState(t, pid) != 'T' {
		runtime.Gosched() // the stop is the peer's to make
	}
	if aboutToRun(pid) {
		t.Fatal("a stopped peer: about to run")
	}
	unix.Kill(pid, unix.SIGKILL)
	p.cmd.Wait()
	if aboutToRun(pid) {
		t.Fatal("a dead peer: about to run")
	}
}

func procState(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	return b[bytes.LastIndexByte(b, ')')+2]
}
