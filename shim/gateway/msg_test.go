package gateway_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// TestMsgDifferential runs testdata/msgprog.c (every message-queue call
// and errno path, EFAULT positions, msqid64_ds and msginfo layouts,
// permissions of an unprivileged child, lrpid of a message handed to a
// sleeping thread) natively in a fresh IPC namespace and under the
// gateway: the outputs must be identical.
func TestMsgDifferential(t *testing.T) {
	bin := buildC(t, "testdata/msgprog.c")
	native, err := harness.NativeCommand(bin).Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	trapped := serve(t, harness.NewEnginesByInode(), bin)
	diff(t, native, trapped)
	if b := harness.TextBallast(); b != nil {
		if _, held := b.TextUsage(); held == 0 {
			t.Error("no message text went through the arena (the shim's path)")
		}
	}
}

// TestMsgSignalsDifferential runs testdata/sigprog.c's message cases:
// a blocked msgrcv and msgsnd interrupted by a handler without and with
// SA_RESTART (EINTR natively in both), a stop and continue (natively the
// call resumes), an ignored signal and a stop with a SIGCONT handler;
// the outputs must be identical natively and under the gateway.
func TestMsgSignalsDifferential(t *testing.T) {
	bin := buildC(t, "testdata/sigprog.c")
	native, err := harness.NativeCommand(bin, "msg").Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	trapped, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, "msg")
	logStats(t, g)
	diff(t, native, trapped)
}

// A msgsnd that Linux fails before load_msg (EINVAL for mtype 0, EFAULT
// reading mtype) allocates nothing in the pod: no helper round trip, no
// reclaim or OOM kill for a call that fails anyway.
func TestMsgsndRefusedChargesNothing(t *testing.T) {
	b := harness.TextBallast()
	if b == nil {
		t.Skip("no arena (not root, or GATEWAY_TEXT_ARENA=0)")
	}
	bin := buildC(t, "testdata/badsnd.c")
	native, err := harness.NativeCommand(bin).Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	_, held0 := b.TextUsage()
	trapped := serve(t, harness.NewEnginesByInode(), bin)
	diff(t, native, trapped)
	if _, held := b.TextUsage(); held != held0 {
		t.Errorf("failed msgsnd calls charged %d bytes of text pages to the pod", held-held0)
	}
}

// TestMsgrcvInterruptedBuffer: a msgrcv of a queued message whose thread
// takes a signal (handler without SA_RESTART) just as its answer is about
// to be sent — after the gateway judged that no signal raced with it —
// fails with EINTR. Natively such a msgrcv took nothing: the caller's
// buffer is as it was and the message still queued (testdata/msgrcvbuf.c
// checks both, after an IPC_STAT that waits for the answer's outcome).
// The gateway writes the message into the buffer before the SEND, so it
// must put the buffer back when the SEND is refused.
func TestMsgrcvInterruptedBuffer(t *testing.T) {
	bin := buildC(t, "testdata/msgrcvbuf.c")
	const reps = 20
	var signalled, gone atomic.Int32
	defer gateway.SetAnswerHook(func(r *gateway.Request) {
		// Only the round's msgrcv (msgflg 0), not the IPC_NOWAIT one
		// that empties the queue after an EINTR.
		if r.Sysno != gateway.SysMsgrcv || r.Notif.Data.Args[4] != 0 {
			return
		}
		signalled.Add(1)
		if err := unix.Tgkill(r.Task.Tgid, r.Task.Tid, unix.SIGUSR1); err != nil {
			t.Errorf("tgkill: %v", err)
			return
		}
		// Wait for the state needed: the kernel took the notification
		// back (the thread is in its handler), so the SEND is refused.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if r.Valid() != nil {
				gone.Add(1)
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	})()
	out, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, strconv.Itoa(reps))
	logStats(t, g)
	t.Logf("%s; %d signalled, %d gone before the SEND", strings.TrimSpace(string(out)), signalled.Load(), gone.Load())
	var eintr, ok, bad int
	if _, err := fmt.Sscanf(string(out), "eintr: %d\nok: %d\nbad: %d", &eintr, &ok, &bad); err != nil {
		t.Fatalf("no result in %q: %v", out, err)
	}
	if bad != 0 {
		t.Errorf("%s", strings.TrimSpace(string(out)))
	}
	if eintr == 0 || int(gone.Load()) != eintr {
		t.Errorf("%d rounds failed with EINTR, %d notifications gone before the SEND: the test did not make the case it checks", eintr, gone.Load())
	}
}
