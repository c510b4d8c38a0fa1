package gateway_test

import (
	"testing"

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
