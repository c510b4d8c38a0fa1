package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	ptypes "github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/spec"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/sysvipcfs/view"
)

// fakeRunc stands in for runc's task service: it records what it was
// asked and what the bundle's spec said at that moment.
type fakeRunc struct {
	taskAPI.TTRPCTaskService
	createErr error
	created   []*specs.Spec
	deleted   []string
}

func (f *fakeRunc) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	sp, err := spec.Load(r.Bundle)
	if err != nil {
		return nil, err
	}
	f.created = append(f.created, sp)
	if f.createErr != nil {
		return nil, f.createErr
	}
	return &taskAPI.CreateTaskResponse{Pid: uint32(os.Getpid())}, nil
}

func (f *fakeRunc) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	f.deleted = append(f.deleted, r.ID+"/"+r.ExecID)
	return &taskAPI.DeleteResponse{}, nil
}

func newTestService(t *testing.T) (*Service, *fakeRunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fakeRunc{}
	ns := NewEngineTable()
	s := &Service{TTRPCTaskService: f, ctx: ctx, ns: ns, sock: filepath.Join(t.TempDir(), "l.sock"), view: view.NewViews(ns.Peek, nil)}
	return s, f
}

// bundle writes a spec to a new bundle directory.
func bundle(t *testing.T, sp *specs.Spec) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func ownIPC(annotations map[string]string) *specs.Spec {
	return &specs.Spec{Version: specs.Version, Annotations: annotations, Linux: &specs.Linux{
		Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}},
		Sysctl:     map[string]string{"kernel.msgmni": "7"},
	}}
}

// Create patches a container with its own IPC namespace before runc sees
// it, records it (limits, options, CRI identity), and Delete forgets it;
// an exec's Delete does not.
func TestCreateDeleteTrapped(t *testing.T) {
	s, f := newTestService(t)
	sp := ownIPC(map[string]string{view.ViewAnnotation: "false", annContainerName: "app", annSandboxName: "pod"})
	if _, err := s.Create(s.ctx, &taskAPI.CreateTaskRequest{ID: "c1", Bundle: bundle(t, sp)}); err != nil {
		t.Fatal(err)
	}
	got := f.created[0].Linux.Seccomp
	if got == nil || got.ListenerPath != s.sock {
		t.Fatalf("runc got an unpatched spec: %+v", got)
	}
	notified := false
	for _, r := range got.Syscalls {
		if r.Action == specs.ActNotify && slices.Contains(r.Names, "semop") {
			notified = true
		}
	}
	if !notified {
		t.Fatal("semop is not trapped")
	}
	if _, err := os.Stat(s.sock); err != nil {
		t.Fatalf("the listener socket is not there for runc: %v", err)
	}
	if !s.ns.Local("c1") || s.ns.ctrs["c1"].limits.MsgMNI != 7 || s.ns.ctrs["c1"].meta.name != "app" {
		t.Fatalf("record: %+v", s.ns.ctrs["c1"])
	}
	if s.ns.ListenerOptions("c1") == (gateway.ListenerOptions{}) {
		t.Fatal("a spec that lets nothing change namespace or ids should allow caching")
	}
	if _, err := s.Delete(s.ctx, &taskAPI.DeleteRequest{ID: "c1", ExecID: "e1"}); err != nil || !s.ns.Local("c1") {
		t.Fatal("an exec's Delete dropped the container")
	}
	if _, err := s.Delete(s.ctx, &taskAPI.DeleteRequest{ID: "c1"}); err != nil || s.ns.Local("c1") {
		t.Fatal("Delete kept the container")
	}
	if !slices.Equal(f.deleted, []string{"c1/e1", "c1/"}) {
		t.Fatalf("runc deleted %v", f.deleted)
	}
}

// A container runc fails to create leaves no record.
func TestCreateFailureForgets(t *testing.T) {
	s, f := newTestService(t)
	f.createErr = errors.New("runc failed")
	if _, err := s.Create(s.ctx, &taskAPI.CreateTaskRequest{ID: "c1", Bundle: bundle(t, ownIPC(nil))}); err == nil {
		t.Fatal("no error")
	}
	if s.ns.Local("c1") || len(s.ns.ctrs) != 0 {
		t.Fatal("a failed create left a record")
	}
}

// The host's IPC namespace is the kernel's: the spec goes to runc as it
// was and nothing is recorded.
func TestCreateHostIPC(t *testing.T) {
	s, f := newTestService(t)
	sp := &specs.Spec{Version: specs.Version, Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}}}}
	if _, err := s.Create(s.ctx, &taskAPI.CreateTaskRequest{ID: "h", Bundle: bundle(t, sp)}); err != nil {
		t.Fatal(err)
	}
	if f.created[0].Linux.Seccomp != nil || s.ns.Local("h") {
		t.Fatal("a host-IPC container was trapped")
	}
}

// A spec whose profile already has a listener is refused with
// InvalidArgument, before runc sees it; so is a bundle without a spec.
func TestCreateRefused(t *testing.T) {
	s, f := newTestService(t)
	sp := ownIPC(nil)
	sp.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, ListenerPath: "/run/other.sock"}
	_, err := s.Create(s.ctx, &taskAPI.CreateTaskRequest{ID: "r", Bundle: bundle(t, sp)})
	if !errdefs.IsInvalidArgument(errgrpc.ToNative(err)) {
		t.Fatalf("error %v, want InvalidArgument", err)
	}
	if _, err := s.Create(s.ctx, &taskAPI.CreateTaskRequest{ID: "r2", Bundle: t.TempDir()}); err == nil {
		t.Fatal("a bundle without config.json was accepted")
	}
	if len(f.created) != 0 || len(s.ns.ctrs) != 0 {
		t.Fatal("a refused container reached runc or was recorded")
	}
}

// TestViewAttachedWaits: Start and Delete wait for a view that Create left
// being mounted, and only for that.
func TestViewAttachedWaits(t *testing.T) {
	s, _ := newTestService(t)
	if err := s.viewAttached(context.Background(), "none"); err != nil {
		t.Fatalf("no view pending: %v", err)
	}
	done := make(chan struct{})
	s.viewing = map[string]chan struct{}{"c": done}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.viewAttached(ctx, "c"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("view pending: %v, want to wait until the deadline", err)
	}
	got := make(chan error, 1)
	go func() { got <- s.viewAttached(context.Background(), "c") }()
	select {
	case err := <-got:
		t.Fatalf("returned %v before the view was attached", err)
	case <-time.After(10 * time.Millisecond):
	}
	close(done)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestWarmSpecParses: the warm-up spec is valid (a typo would make the
// warm-up silently do half its work).
func TestWarmSpecParses(t *testing.T) {
	var s specs.Spec
	d := json.NewDecoder(strings.NewReader(warmSpec))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		t.Fatal(err)
	}
	if s.Linux == nil || s.Linux.Seccomp == nil || len(s.Linux.Seccomp.Syscalls) == 0 || s.Process == nil || s.Linux.Resources == nil {
		t.Fatalf("warm-up spec lacks parts: %+v", s)
	}
}

// pauseRunc fails its first fails pauses the way runc does when its
// freeze loses to a loaded machine, or with err if set.
type pauseRunc struct {
	taskAPI.TTRPCTaskService
	fails, paused int
	err           error
}

func (f *pauseRunc) Pause(ctx context.Context, r *taskAPI.PauseRequest) (*ptypes.Empty, error) {
	f.paused++
	if f.err != nil {
		return nil, f.err
	}
	if f.paused <= f.fails {
		// As containerd's runc shim returns it (errgrpc over ttrpc).
		return nil, errgrpc.ToGRPC(fmt.Errorf("OCI runtime pause failed: unable to freeze: %w", errdefs.ErrUnknown))
	}
	return &ptypes.Empty{}, nil
}

// Pause tries runc pause again when runc's freeze lost to the load (it
// thawed the container), up to pauseTries times, and not for other errors.
func TestPauseTriesAgain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw, err := gateway.New(ctx, NewEngineTable())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		f         pauseRunc
		wantErr   bool
		wantTries int
	}{
		{"lost twice", pauseRunc{fails: 2}, false, 3},
		{"lost every time", pauseRunc{fails: 100}, true, pauseTries},
		{"other error", pauseRunc{err: errgrpc.ToGRPC(errdefs.ErrNotFound)}, true, 1},
	} {
		f := c.f
		s := &Service{TTRPCTaskService: &f, ctx: ctx, ns: NewEngineTable(), gw: gw}
		_, err := s.Pause(ctx, &taskAPI.PauseRequest{ID: "c1"})
		if (err != nil) != c.wantErr || f.paused != c.wantTries {
			t.Errorf("%s: err %v after %d tries, want error %v after %d", c.name, err, f.paused, c.wantErr, c.wantTries)
		}
	}
}
