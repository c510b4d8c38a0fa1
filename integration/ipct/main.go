// Command ipct is a small static System V IPC tool for the integration
// tests and the demo: it runs inside containers (busybox rootfs) and makes
// the raw semget/semop/semctl/msgget/msgsnd/msgrcv/msgctl system calls.
//
// Keys are numbers (0x1234 or 4660). Output is one line, machine-readable.
// Errors print "ERR <errno name>" on stdout and exit with status 1.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	ipcCreat  = 0o1000
	ipcExcl   = 0o2000
	ipcNoWait = 0o4000
	ipcRmid   = 0
	ipcStat   = 2
	semUndo   = 0x1000
	getPid    = 11
	getVal    = 12
	getNcnt   = 14
	setVal    = 16
)

type sembuf struct {
	num uint16
	op  int16
	flg int16
}

func die(err error) {
	if e, ok := err.(unix.Errno); ok {
		fmt.Printf("ERR %s\n", unix.ErrnoName(e))
	} else {
		fmt.Printf("ERR %v\n", err)
	}
	os.Exit(1)
}

func num(s string) int64 {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ipct: bad number %q\n", s)
		os.Exit(2)
	}
	return v
}

func semget(key int64, nsems int, flg int) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_SEMGET, uintptr(int32(key)), uintptr(nsems), uintptr(flg))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// The blocking calls are retried on EINTR: the Go runtime's preemption
// signal (SIGURG) interrupts them, and semop/msgrcv/msgsnd are never
// restarted after a signal handler (man 7 signal).

// sys6 makes the calls of semop, msgsnd and msgrcv. The timing loops
// (semloop, pingpong) switch it to RawSyscall6, as a C program calls:
// with Syscall6 the Go runtime hands the thread's P to another thread
// during any call longer than ~20 µs, a trapped call included, and takes
// it back after, which would be charged to the shim.
//
// Called through this variable, not directly, the compiler does not keep
// alive what a pointer converted to uintptr in the arguments points to
// (unsafe.Pointer's rule 4 covers direct calls of syscall functions
// only): every caller keeps its buffer alive itself (runtime.KeepAlive)
// until the call returns. A trapped call is read by the shim while the
// caller waits; a garbage collection in that time freed msgsnd's buffer,
// and the shim read mtype 0 and answered EINVAL.
var sys6 = unix.Syscall6

func semop(id int, sops []sembuf) error {
	for {
		if err := semop1(id, sops); err != unix.EINTR {
			return err
		}
	}
}

func semop1(id int, sops []sembuf) error {
	_, _, e := sys6(unix.SYS_SEMOP, uintptr(id), uintptr(unsafe.Pointer(&sops[0])), uintptr(len(sops)), 0, 0, 0)
	runtime.KeepAlive(sops)
	if e != 0 {
		return e
	}
	return nil
}

func semctl(id, n, cmd int, arg uintptr) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), uintptr(n), uintptr(cmd), arg, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func msgget(key int64, flg int) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(int32(key)), uintptr(flg), 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func msgsnd(id int, typ int64, text string, flg int) error {
	for {
		if err := msgsnd1(id, typ, text, flg); err != unix.EINTR {
			return err
		}
	}
}

func msgsnd1(id int, typ int64, text string, flg int) error {
	b := make([]byte, 8+len(text))
	*(*int64)(unsafe.Pointer(&b[0])) = typ
	copy(b[8:], text)
	_, _, e := sys6(unix.SYS_MSGSND, uintptr(id), uintptr(unsafe.Pointer(&b[0])), uintptr(len(text)), uintptr(flg), 0, 0)
	runtime.KeepAlive(b)
	if e != 0 {
		return e
	}
	return nil
}

func msgrcv(id int, typ int64, flg int) (int64, string, error) {
	for {
		t, s, err := msgrcv1(id, typ, flg)
		if err != unix.EINTR {
			return t, s, err
		}
	}
}

// rcvBuf is msgrcv's buffer (ipct is one goroutine).
var rcvBuf [8 + 8192]byte

func msgrcv1(id int, typ int64, flg int) (int64, string, error) {
	b := rcvBuf[:]
	r, _, e := sys6(unix.SYS_MSGRCV, uintptr(id), uintptr(unsafe.Pointer(&b[0])), 8192, uintptr(typ), uintptr(flg), 0)
	if e != 0 {
		return 0, "", e
	}
	return *(*int64)(unsafe.Pointer(&b[0])), string(b[8 : 8+r]), nil
}

func msgctl(id, cmd int, arg uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), uintptr(cmd), arg)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// semKey opens an existing set by key.
func semKey(s string) int {
	id, err := semget(num(s), 0, 0)
	if err != nil {
		die(err)
	}
	return id
}

func msgKey(s string) int {
	id, err := msgget(num(s), 0)
	if err != nil {
		die(err)
	}
	return id
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: ipct CMD ARGS
  semget KEY NSEMS [create] [excl]   print the set's id
  setval KEY NUM VAL | getval KEY NUM | getpid KEY NUM | getncnt KEY NUM
  semop KEY NUM OP [undo] [nowait]  print "ok PID"
  hold KEY NUM                       semop -1 with SEM_UNDO, print "held", sleep
  semrmid ID | semrm KEY
  msgget KEY [create] [excl]         print the queue's id
  msgsnd KEY TYPE TEXT | msgrcv KEY TYPE [nowait] | msgrm KEY | msgqnum KEY
  semloop KEY N [undo]               N semop -1/+1 pairs; print ns per pair
  pingpong KEY N ping|pong           msg round trips; ping prints ns per trip
  unshare KEY                        on one thread: semget KEY, unshare(CLONE_NEWIPC),
                                     semget KEY again; one line per step
  pid                                print the caller's pid
  now                                print the time in ns since the epoch
  fill SIZE MAXBYTES                 private queues filled with SIZE-byte messages
                                     (IPC_NOWAIT) until an error or MAXBYTES queued;
                                     "queued N" per MiB, then "stopped N ERR/ok"
  rmall                              remove every queue of the namespace
  worker SEMKEY MSGKEY N             N times: lock, take the counter from the
                                     queue, put it back plus one, unlock
`)
	os.Exit(2)
}

func has(args []string, w string) bool {
	for _, a := range args {
		if a == w {
			return true
		}
	}
	return false
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	a := os.Args[2:]
	need := func(n int) {
		if len(a) < n {
			usage()
		}
	}
	switch os.Args[1] {
	case "semget":
		need(2)
		flg := 0o666
		if has(a, "create") {
			flg |= ipcCreat
		}
		if has(a, "excl") {
			flg |= ipcExcl
		}
		id, err := semget(num(a[0]), int(num(a[1])), flg)
		if err != nil {
			die(err)
		}
		fmt.Println(id)
	case "setval":
		need(3)
		if _, err := semctl(semKey(a[0]), int(num(a[1])), setVal, uintptr(num(a[2]))); err != nil {
			die(err)
		}
		fmt.Println("ok")
	case "getval", "getpid", "getncnt":
		need(2)
		cmd := getVal
		switch os.Args[1] {
		case "getpid":
			cmd = getPid
		case "getncnt":
			cmd = getNcnt
		}
		v, err := semctl(semKey(a[0]), int(num(a[1])), cmd, 0)
		if err != nil {
			die(err)
		}
		fmt.Println(v)
	case "semop", "hold":
		need(2)
		op := int16(-1)
		flg := int16(semUndo)
		if os.Args[1] == "semop" {
			need(3)
			op, flg = int16(num(a[2])), 0
			if has(a, "undo") {
				flg |= semUndo
			}
			if has(a, "nowait") {
				flg |= ipcNoWait
			}
		}
		if err := semop(semKey(a[0]), []sembuf{{uint16(num(a[1])), op, flg}}); err != nil {
			die(err)
		}
		if os.Args[1] == "hold" {
			fmt.Println("held")
			for {
				time.Sleep(time.Hour)
			}
		}
		fmt.Println("ok", os.Getpid())
	case "semrmid":
		need(1)
		if _, err := semctl(int(num(a[0])), 0, ipcRmid, 0); err != nil {
			die(err)
		}
		fmt.Println("ok")
	case "semrm":
		need(1)
		if _, err := semctl(semKey(a[0]), 0, ipcRmid, 0); err != nil {
			die(err)
		}
		fmt.Println("ok")
	case "msgget":
		need(1)
		flg := 0o666
		if has(a, "create") {
			flg |= ipcCreat
		}
		if has(a, "excl") {
			flg |= ipcExcl
		}
		id, err := msgget(num(a[0]), flg)
		if err != nil {
			die(err)
		}
		fmt.Println(id)
	case "msgsnd":
		need(3)
		if err := msgsnd(msgKey(a[0]), num(a[1]), strings.Join(a[2:], " "), 0); err != nil {
			die(err)
		}
		fmt.Println("ok")
	case "msgrcv":
		need(2)
		flg := 0
		if has(a, "nowait") {
			flg |= ipcNoWait
		}
		_, text, err := msgrcv(msgKey(a[0]), num(a[1]), flg)
		if err != nil {
			die(err)
		}
		fmt.Println(text)
	case "msgrm":
		need(1)
		if _, err := msgctl(msgKey(a[0]), ipcRmid, 0); err != nil {
			die(err)
		}
		fmt.Println("ok")
	case "fill":
		need(2)
		fill(int(num(a[0])), num(a[1]))
	case "rmall":
		// Every queue of the namespace, found by index (MSG_STAT).
		n := 0
		var ds [120]byte
		for idx := 0; idx < 32768; idx++ {
			id, err := msgctl(idx, 11, uintptr(unsafe.Pointer(&ds[0]))) // MSG_STAT
			if err == nil && func() bool { _, err := msgctl(id, ipcRmid, 0); return err == nil }() {
				n++
			}
		}
		fmt.Println("removed", n)
	case "msgqnum":
		need(1)
		var ds [120]byte // struct msqid64_ds
		if _, err := msgctl(msgKey(a[0]), ipcStat, uintptr(unsafe.Pointer(&ds[0]))); err != nil {
			die(err)
		}
		// msg_qnum follows ipc64_perm (48), stime, rtime, ctime (24), cbytes (8).
		fmt.Println(*(*uint64)(unsafe.Pointer(&ds[80])))
	case "semloop":
		// N times semop -1 then +1 (with SEM_UNDO if asked), print the
		// mean time of one pair in ns.
		need(2)
		id, n := semKey(a[0]), int(num(a[1]))
		flg := int16(0)
		if has(a, "undo") {
			flg = semUndo
		}
		down, up := []sembuf{{0, -1, flg}}, []sembuf{{0, 1, flg}}
		sys6 = unix.RawSyscall6
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := semop(id, down); err != nil {
				die(err)
			}
			if err := semop(id, up); err != nil {
				die(err)
			}
		}
		fmt.Println(time.Since(t0).Nanoseconds() / int64(n))
	case "semlooppriv":
		// semlooppriv N: semloop on a private set of its own (value 1),
		// removed afterwards; prints the mean time of one pair in ns.
		need(1)
		n := int(num(a[0]))
		id, err := semget(0, 1, 0o600)
		if err != nil {
			die(err)
		}
		if _, err := semctl(id, 0, setVal, 1); err != nil {
			die(err)
		}
		down, up := []sembuf{{0, -1, 0}}, []sembuf{{0, 1, 0}}
		sys6 = unix.RawSyscall6
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := semop(id, down); err != nil {
				die(err)
			}
			if err := semop(id, up); err != nil {
				die(err)
			}
		}
		el := time.Since(t0)
		_, _ = semctl(id, 0, ipcRmid, 0)
		fmt.Println(el.Nanoseconds() / int64(n))
	case "sysloop":
		// sysloop getppid|write N: N raw calls that the shim does not
		// trap (write: one byte to /dev/null); prints ns per call.
		need(2)
		n := int(num(a[1]))
		fd, err := unix.Open("/dev/null", unix.O_WRONLY, 0)
		if err != nil {
			die(err)
		}
		b := []byte{0}
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if a[0] == "write" {
				unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1)
			} else {
				unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
			}
		}
		fmt.Println(time.Since(t0).Nanoseconds() / int64(n))
	case "pingpong":
		// pingpong KEY N ping|pong: N round trips of an 8-byte message
		// (type 1 one way, type 2 back); ping prints ns per round trip.
		need(3)
		id, n := msgKey(a[0]), int(num(a[1]))
		in, out := int64(2), int64(1)
		if a[2] == "pong" {
			in, out = 1, 2
		}
		sys6 = unix.RawSyscall6
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if a[2] == "ping" {
				if err := msgsnd(id, out, "12345678", 0); err != nil {
					die(err)
				}
			}
			if _, _, err := msgrcv(id, in, 0); err != nil {
				die(err)
			}
			if a[2] == "pong" {
				if err := msgsnd(id, out, "12345678", 0); err != nil {
					die(err)
				}
			}
		}
		if a[2] == "ping" {
			fmt.Println(time.Since(t0).Nanoseconds() / int64(n))
		}
	case "unshare":
		need(1)
		// One thread throughout: the gateway caches a thread's IPC
		// namespace and must notice that this one moved.
		runtime.LockOSThread()
		show := func(id int, err error) {
			if err != nil {
				fmt.Printf("ERR %s\n", unix.ErrnoName(err.(unix.Errno)))
				return
			}
			fmt.Println(id)
		}
		show(semget(num(a[0]), 0, 0))
		if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
			fmt.Printf("unshare ERR %s\n", unix.ErrnoName(err.(unix.Errno)))
		} else {
			fmt.Println("unshare ok")
		}
		show(semget(num(a[0]), 0, 0))
	case "pid":
		fmt.Println(os.Getpid())
	case "now":
		fmt.Println(time.Now().UnixNano())
	case "worker":
		need(3)
		sid, qid, n := semKey(a[0]), msgKey(a[1]), int(num(a[2]))
		for i := 0; i < n; i++ {
			if err := semop(sid, []sembuf{{0, -1, semUndo}}); err != nil {
				die(err)
			}
			_, text, err := msgrcv(qid, 1, 0)
			if err != nil {
				die(err)
			}
			v, _ := strconv.Atoi(text)
			if err := msgsnd(qid, 1, strconv.Itoa(v+1), 0); err != nil {
				die(err)
			}
			if err := semop(sid, []sembuf{{0, 1, semUndo}}); err != nil {
				die(err)
			}
		}
		fmt.Printf("worker %d done %d\n", os.Getpid(), n)
	default:
		usage()
	}
}

// fill queues messages of size bytes in private queues (a new queue when
// one is full) until a call fails otherwise or max bytes are queued. It
// returns the queues it made.
func fill(size int, max int64) []int {
	text := strings.Repeat("x", size)
	var queued, reported int64
	q := -1
	var err error
	var queues []int
	for queued < max {
		if q < 0 {
			if q, err = msgget(0, 0o600); err != nil { // IPC_PRIVATE
				break
			}
			queues = append(queues, q)
		}
		err = msgsnd(q, 1, text, ipcNoWait)
		if err == unix.EAGAIN {
			q = -1
			continue
		}
		if err != nil {
			break
		}
		queued += int64(size)
		if queued-reported >= 1<<20 {
			fmt.Println("queued", queued)
			reported = queued
		}
	}
	if err != nil {
		fmt.Printf("stopped %d ERR %s\n", queued, unix.ErrnoName(err.(unix.Errno)))
		return queues
	}
	fmt.Printf("stopped %d ok\n", queued)
	return queues
}
