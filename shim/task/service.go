// Package task is the shim's task service: containerd's runc task service,
// with Create patching the bundle so that the container's System V IPC
// calls are trapped and served by the engines, and Delete freeing the
// container's engine namespace.
package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	runctask "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task"
	ptypes "github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/listener"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/spec"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/sysvipcfs/view"
)

// Service is the task service: runc's, with Create and Delete extended.
type Service struct {
	taskAPI.TTRPCTaskService

	ctx  context.Context
	ns   *EngineTable
	gw   *gateway.Gateway
	sock string
	view *view.Views // the in-container /proc view

	mu  sync.Mutex
	srv *listener.Server // listening once the first trapped container is created
	// viewing holds, by container id, a channel closed once its view is
	// attached (or failed to be): Create returns before, Start and Delete
	// wait for it.
	viewing map[string]chan struct{}

	ctl *controlState // the control endpoint: ipcctl and metrics (control.go)
}

// ReceiversEnv, in the shim's environment (containerd's), bounds the
// receivers serving one container process tree's trapped calls
// (gateway.Gateway.Receivers; default 1: on 2 vCPUs more was slower).
const ReceiversEnv = "IPC_SHIM_RECEIVERS"

// NewService wraps runc's task service.
func NewService(ctx context.Context, publisher shim.Publisher, sd shutdown.Service) (*Service, error) {
	go warmSpecJSON() // before Create's spec.Load needs it
	inner, err := runctask.NewTaskService(ctx, publisher, sd)
	if err != nil {
		return nil, err
	}
	ns := NewEngineTable()
	ns.Logf = func(f string, a ...any) { log.G(ctx).Infof(f, a...) }
	ns.ChargePods = true
	gw, err := gateway.New(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("io.containerd.ipc.v2: start the IPC gateway: %w", err)
	}
	gw.Logf = func(f string, a ...any) { log.G(ctx).Warnf(f, a...) }
	if n, err := strconv.Atoi(os.Getenv(ReceiversEnv)); err == nil && n > 0 {
		gw.Receivers = n
	}
	s := &Service{TTRPCTaskService: inner, ctx: ctx, ns: ns, gw: gw, sock: SocketPath()}
	if n := sweepStale(filepath.Dir(s.sock)); n > 0 {
		log.G(ctx).Infof("removed %d socket(s) left by shims that died", n)
	}
	ns.OnCreate = s.publish
	ns.OnFree = func(ino uint64) {
		s.unpublish(ino)
		gw.Unwatch(ino)
	}
	s.view = view.NewViews(ns.Peek, gw)
	s.view.Logf = func(f string, a ...any) { log.G(ctx).Infof(f, a...) }
	sd.RegisterCallback(func(context.Context) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.srv != nil {
			os.Remove(s.sock)
		}
		return nil
	})
	sd.RegisterCallback(func(context.Context) error {
		s.logExit()
		return nil
	})
	s.startControl(sd)
	return s, nil
}

// logExit logs, as the shim shuts down, the CPU time it used (the runc
// commands it ran are its children and not counted) and how it set up the
// kernel's task events: what one container start costs the host beyond
// runc's shim (docs/bench-shim.md, scripts/bench-start.sh).
func (s *Service) logExit() {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return
	}
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	events := "not loaded"
	if li, ok := s.gw.TracerLoad(); ok {
		how := "kernel BTF parsed"
		if li.Cached {
			how = "kernel facts cached"
		}
		events = fmt.Sprintf("loaded in %v, %s", li.Duration.Round(time.Microsecond), how)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	log.G(s.ctx).Infof("shim exits: CPU time %v (user %v, system %v), max RSS %d KiB, %d GCs, %d KiB allocated; kernel task events %s",
		tv(ru.Utime)+tv(ru.Stime), tv(ru.Utime), tv(ru.Stime), ru.Maxrss, ms.NumGC, ms.TotalAlloc>>10, events)
}

// RegisterTTRPC registers the service (shim.TTRPCService).
func (s *Service) RegisterTTRPC(server *ttrpc.Server) error {
	taskAPI.RegisterTTRPCTaskService(server, s)
	return nil
}

// SocketPath returns the path of the shim's listenerPath socket,
// /run/containerd-shim-ipc/<hash of the shim's working directory>.sock:
// the shim starts in its first container's bundle, unique per shim
// process, and a bundle path is too long for a unix socket's 108 bytes.
func SocketPath() string {
	cwd, _ := os.Getwd()
	h := sha256.Sum256([]byte(cwd))
	return filepath.Join("/run/containerd-shim-ipc", hex.EncodeToString(h[:12])+".sock")
}

// listen starts the listenerPath server once. runc dials the socket
// synchronously during create: it must be listening before runc runs.
func (s *Service) listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.sock), 0o700); err != nil {
		return err
	}
	srv, err := listener.Listen(s.sock)
	if err != nil {
		return err
	}
	srv.Errorf = func(f string, a ...any) { log.G(s.ctx).Errorf(f, a...) }
	s.srv = srv
	go s.serveSocket(srv)
	log.G(s.ctx).Infof("seccomp listener socket %s", s.sock)
	return nil
}

// serveSocket serves runc's connections on srv until the shim shuts down;
// a stop before that is logged as the error it is.
func (s *Service) serveSocket(srv *listener.Server) {
	if err := srv.Serve(s.ctx, s.handle); s.failedServing(err) {
		log.G(s.ctx).WithError(err).Error("io.containerd.ipc.v2: seccomp listener socket stopped; new containers and execs will fail")
	}
}

// failedServing reports whether err, from a server run on the shim's
// context, stopped it while the shim still serves. At the shim's own
// shutdown every server stops with the context's error, which is
// containerd's shutdown.ErrShutdown, not context.Canceled: not a failure.
func (s *Service) failedServing(err error) bool {
	return err != nil && s.ctx.Err() == nil
}

// handle takes one process's seccomp listener from runc and serves it.
func (s *Service) handle(ctx context.Context, m *listener.Message) error {
	f := m.SeccompFile()
	for name, g := range m.Files {
		if name != listener.SeccompFdName {
			g.Close()
		}
	}
	if f == nil {
		return fmt.Errorf("no %s in the message", listener.SeccompFdName)
	}
	id, pid := m.State.State.ID, m.State.Pid
	ino, err := gateway.IPCNamespace(pid)
	if err != nil {
		f.Close()
		return fmt.Errorf("IPC namespace of pid %d: %w", pid, err)
	}
	l, err := seccompnotify.New(f)
	if err != nil {
		return err
	}
	foreign := !s.ns.Local(id)
	s.ns.Attach(id, ino, pid)
	s.noteProcess(id, pid)
	log.G(ctx).WithField("container", id).Debugf("serving seccomp listener of pid %d (status %s), IPC namespace %d", pid, m.State.State.Status, ino)
	go func() {
		defer l.Close()
		if foreign {
			// A container of another shim: it leaves when its last
			// listener is done (join.go).
			defer func() {
				if s.ns.Release(id) {
					s.foreignLeft()
				}
			}()
		}
		opts := s.ns.ListenerOptions(id)
		opts.IPCNS = ino
		opts.Container = id // the fence of its Pause (FreezingContainer)
		if err := s.gw.ServeListener(s.ctx, l, opts); s.failedServing(err) {
			log.G(s.ctx).WithField("container", id).WithError(err).Errorf("seccomp listener of pid %d failed: its IPC calls now fail with ENOSYS", pid)
		}
	}()
	return nil
}

func refuse(err error) error {
	var se *spec.Error
	if errors.As(err, &se) {
		return errgrpc.ToGRPC(fmt.Errorf("io.containerd.ipc.v2: %s: %w", se.Msg, errdefs.ErrInvalidArgument))
	}
	return errgrpc.ToGRPC(fmt.Errorf("io.containerd.ipc.v2: %w", err))
}

// Create patches the bundle's spec, then lets runc's service create the
// container.
func (s *Service) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	lg := log.G(ctx).WithField("container", r.ID)
	t0 := time.Now()
	opts, err := RuncOptions(r.Options)
	if err != nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("io.containerd.ipc.v2: %w: %w", err, errdefs.ErrInvalidArgument))
	}
	r.Options = opts
	sp, err := spec.Load(r.Bundle)
	if err != nil {
		return nil, refuse(fmt.Errorf("read the container's OCI spec: %w", err))
	}
	plan, err := spec.Patch(sp, s.sock)
	if err != nil {
		lg.WithError(err).Error("container refused")
		return nil, refuse(err)
	}
	if plan.Trapped && plan.IPCPath != "" {
		// Joining another container's IPC namespace: its objects must be
		// in this shim's engines, or the two would see different ones.
		var st unix.Stat_t
		if err := unix.Stat(plan.IPCPath, &st); err != nil {
			return nil, refuse(fmt.Errorf("the IPC namespace to join, %s: %w", plan.IPCPath, err))
		}
		if !s.ns.Known(st.Ino) {
			// Served by another shim (join.go): runc hands this
			// container's listeners to that shim.
			owner := s.owner(st.Ino)
			if owner == "" {
				err := &spec.Error{Msg: fmt.Sprintf("the container joins the IPC namespace %s, which no io.containerd.ipc.v2 shim serves: "+
					"its System V objects are the kernel's (a container of another runtime, or a namespace made outside containerd). "+
					"Run the container that owns the namespace with runtime io.containerd.ipc.v2 too, or run this one with io.containerd.runc.v2", plan.IPCPath)}
				lg.WithError(err).Error("container refused")
				return nil, refuse(err)
			}
			sp.Linux.Seccomp.ListenerPath = owner
			if err := spec.Save(r.Bundle, sp); err != nil {
				return nil, refuse(fmt.Errorf("write the patched OCI spec: %w", err))
			}
			lg.Infof("trapping %v: joins IPC namespace %s, served by the shim listening on %s", plan.Notified, plan.IPCPath, owner)
			return s.TTRPCTaskService.Create(ctx, r)
		}
	}
	tp := time.Now()
	if plan.Trapped {
		if err := s.listen(); err != nil {
			return nil, refuse(fmt.Errorf("open the seccomp listener socket %s: %w", s.sock, err))
		}
		if err := spec.Save(r.Bundle, sp); err != nil {
			return nil, refuse(fmt.Errorf("write the patched OCI spec: %w", err))
		}
		s.ns.Prepare(r.ID, plan.Limits, gateway.ListenerOptions{NSFixed: plan.NSFixed, IDsFixed: plan.IDsFixed}, metaOf(sp))
		lg.Infof("trapping %v (IPC namespace %s); namespace changes: %s; group changes: %s; id changes: %s", plan.Notified, orNew(plan.IPCPath), nsChanges(plan), groupChanges(plan), idChanges(plan))
	} else {
		lg.Info("host IPC namespace or no IPC call allowed by the profile: System V IPC calls go to the kernel")
	}
	t1 := time.Now()
	resp, err := s.TTRPCTaskService.Create(ctx, r)
	if err != nil && plan.Trapped {
		s.ns.Remove(r.ID)
	}
	if err == nil && plan.Trapped && view.Wanted(sp) {
		// The view is mounted while containerd answers ctr and ctr asks
		// for Start, which waits for it (viewAttached): the container's
		// code runs only after, as when Create mounted it itself.
		done := make(chan struct{})
		s.mu.Lock()
		if s.viewing == nil {
			s.viewing = map[string]chan struct{}{}
		}
		s.viewing[r.ID] = done
		s.mu.Unlock()
		go func() {
			defer close(done)
			s.attachView(s.ctx, r.ID, int(resp.Pid))
		}()
	}
	lg.Debugf("create: spec read and patched %v, listener and spec written %v, runc create %v", tp.Sub(t0), t1.Sub(tp), time.Since(t1))
	return resp, err
}

// viewAttached waits until the view of container id, if Create began to
// mount one, is mounted or has failed to be.
func (s *Service) viewAttached(ctx context.Context, id string) error {
	s.mu.Lock()
	done := s.viewing[id]
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Start starts a created container, or an exec'd process, once the
// gateway follows the kernel's task events (gateway.Ready): the shim
// loads them in the background while runc creates the first container,
// and no code of a trapped container may run before, or a signal it
// takes could go unseen.
func (s *Service) Start(ctx context.Context, r *taskAPI.StartRequest) (*taskAPI.StartResponse, error) {
	if s.ns.Local(r.ID) {
		t := time.Now()
		if err := s.gw.Ready(ctx); err != nil {
			return nil, errgrpc.ToGRPC(fmt.Errorf("io.containerd.ipc.v2: %w", err))
		}
		lg := log.G(ctx).WithField("container", r.ID)
		if li, ok := s.gw.TracerLoad(); ok {
			lg.Debugf("kernel task events ready after a wait of %v (loaded in %v, facts cached: %v, cache: %v)", time.Since(t), li.Duration, li.Cached, li.CacheErr)
		}
		if r.ExecID == "" {
			t = time.Now()
			if err := s.viewAttached(ctx, r.ID); err != nil {
				return nil, errgrpc.ToGRPC(fmt.Errorf("io.containerd.ipc.v2: %w", err))
			}
			lg.Debugf("/proc/sysvipc view ready after a wait of %v", time.Since(t))
		}
	}
	return s.TTRPCTaskService.Start(ctx, r)
}

// Pause freezes a container (runc pause) behind the gateway's fence and
// then has the gateway take its sleepers off their queues.
//
// The freezer ends the trapped calls of the tasks it freezes without a
// signal the gateway could see: an answer sent to one as it is frozen
// can be lost, and the call restarts when thawed. So the gateway is told
// first (Gateway.FreezingContainer): until the freeze is done (or
// failed) no answer to a task of the container goes out as a plain SEND
// (gateway/freeze.go); the other containers' answers are not held up.
// Once frozen, no task of the container has a call in the trap, and
// answers to the others need no fence: it ends when Pause returns, and
// Resume needs no hook (a thawed task's restart gets the answer kept for
// it). A container of another shim whose listeners this shim serves
// (join.go) is paused through its own shim: this gateway raises no
// fence for it (gateway doc, "What is not exact").
//
// Natively a frozen sleeper is not counted (GETNCNT, /proc/sysvipc):
// Frozen takes them off their queues. Resumed, they call again. A
// ballast helper frozen with the container (cgroup v2) is let go
// (EngineTable.Paused).
//
// runc's freeze on cgroup v1 can fail on a loaded machine: it writes
// FROZEN up to 1000 times, thawing briefly every 50, and a task that
// waits longer than that for a CPU keeps the cgroup FREEZING; runc then
// thaws it and fails "unable to freeze" (runc#2791: "still a game of
// chances"). The container is then running as before, so Pause tries
// again, up to pauseTries times, with the fence kept up.
func (s *Service) Pause(ctx context.Context, r *taskAPI.PauseRequest) (*ptypes.Empty, error) {
	end := s.gw.FreezingContainer(r.ID)
	defer end()
	resp, err := s.TTRPCTaskService.Pause(ctx, r)
	for try := 2; err != nil && try <= pauseTries && freezeLost(err) && ctx.Err() == nil; try++ {
		log.G(ctx).WithError(err).Warnf("pause %s: runc could not freeze the container; try %d of %d", r.ID, try, pauseTries)
		resp, err = s.TTRPCTaskService.Pause(ctx, r)
	}
	if err == nil {
		s.gw.Frozen()
		s.ns.Paused(r.ID)
	}
	return resp, err
}

// pauseTries bounds runc pause's tries in Pause.
const pauseTries = 4

// freezeLost reports whether err is runc's failure to freeze in time:
// on cgroup v1 after its tries (it thawed the container), on cgroup v2
// after its timeout (cgroup.freeze stays 1: a try writes it again). The
// error reaches the shim as text only.
func freezeLost(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "unable to freeze") || strings.Contains(msg, "waiting for the cgroup to freeze")
}

// nsChanges says in words how the gateway learns of a thread changing
// IPC namespace (spec.Plan.NSFixed).
func nsChanges(p *spec.Plan) string {
	switch {
	case !p.NSFixed:
		return "possible unseen, IPC namespace reread on every call"
	case len(p.NSNotified) > 0:
		return fmt.Sprintf("%v trapped and let run", p.NSNotified)
	}
	return "refused by the profile"
}

// groupChanges says in words how the gateway learns of a thread changing
// its supplementary groups (spec.Plan.GroupsNotified).
func groupChanges(p *spec.Plan) string {
	if len(p.GroupsNotified) > 0 {
		return fmt.Sprintf("%v trapped and let run", p.GroupsNotified)
	}
	return "not trapped (the profile does not allow setgroups unconditionally): seen at the next id change"
}

// idChanges says in words how the gateway learns of a thread changing its
// uids or gids (spec.Plan.IDsFixed).
func idChanges(p *spec.Plan) string {
	switch {
	case !p.IDsFixed:
		return "possible unseen, credentials compared on every call"
	case len(p.IDsNotified) > 0:
		return fmt.Sprintf("%v trapped and let run", p.IDsNotified)
	}
	return "refused by the profile"
}

func orNew(p string) string {
	if p == "" {
		return "new"
	}
	return p
}

// Delete deletes a process; deleting a container frees its engine
// namespace when it was the last member.
func (s *Service) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	if r.ExecID == "" {
		s.ns.Evict(r.ID) // runc removes the container's cgroup
	}
	resp, err := s.TTRPCTaskService.Delete(ctx, r)
	if err == nil && r.ExecID == "" {
		// A view still being mounted (a container deleted unstarted)
		// is detached once it is, or as far as it got when Delete's
		// caller gives up (a mount that outlives its container's mount
		// namespace stops with it).
		s.viewAttached(ctx, r.ID)
		s.mu.Lock()
		delete(s.viewing, r.ID)
		s.mu.Unlock()
		s.view.Detach(r.ID)
		s.ns.Remove(r.ID)
	}
	return resp, err
}

// attachView mounts the view into a created container; a failure is
// logged and leaves the container with the kernel's (empty) files.
func (s *Service) attachView(ctx context.Context, id string, pid int) {
	t := time.Now()
	if _, err := s.view.Attach(id, pid); err != nil {
		log.G(ctx).WithField("container", id).WithError(err).Warn("io.containerd.ipc.v2: no /proc/sysvipc view in the container: ipcs there shows the kernel's empty tables")
		return
	}
	log.G(ctx).WithField("container", id).Debugf("/proc/sysvipc view mounted in %v", time.Since(t))
}
