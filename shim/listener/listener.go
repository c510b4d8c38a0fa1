// Package listener serves runc's seccomp listenerPath protocol: runc
// connects to a unix socket once per container process that has a
// SCMP_ACT_NOTIFY filter (the container's init at create, and each exec)
// and sends one message, the JSON ContainerProcessState with the listener
// fd attached as SCM_RIGHTS. runc does not close the connection after
// sending, so the server acts on the message as soon as it has parsed it.
package listener

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SeccompFdName is the name runc gives the listener fd in
// ContainerProcessState.Fds.
const SeccompFdName = "seccompFd"

// State is the OCI runtime state of the container (runtime-spec
// specs.State).
type State struct {
	Version     string            `json:"ociVersion"`
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Pid         int               `json:"pid,omitempty"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ContainerProcessState is the message runc sends (runtime-spec
// specs.ContainerProcessState).
type ContainerProcessState struct {
	Version string `json:"ociVersion"`
	// Fds names the fds sent along, in order.
	Fds []string `json:"fds"`
	// Pid is the process that owns the filter, in the pid namespace of
	// runc (the host's, for the shim).
	Pid int `json:"pid"`
	// Metadata is the seccomp listenerMetadata of the OCI config.
	Metadata string `json:"metadata,omitempty"`
	State    State  `json:"state"`
}

// Message is one received message: the state and the fds that came with
// it, by name. The handler owns the files.
type Message struct {
	State ContainerProcessState
	Files map[string]*os.File
}

// SeccompFile returns the seccomp listener fd of the message, or nil.
func (m *Message) SeccompFile() *os.File { return m.Files[SeccompFdName] }

// Handler is called once per received message, on the connection's
// goroutine; it owns m.Files. An error is logged by the server's Errorf.
type Handler func(ctx context.Context, m *Message) error

// Limits on what one connection may send, so a misbehaving peer can
// neither grow the server nor hold a goroutine forever.
const (
	// MaxMessage bounds the JSON (runc sends annotations; 1 MiB is far
	// above any real state).
	MaxMessage = 1 << 20
	// MaxFds bounds the fds accepted with one message.
	MaxFds = 16
	// ReadTimeout bounds the time a peer may take to send its message.
	ReadTimeout = 10 * time.Second
)

// Server accepts runc's connections on a unix socket.
type Server struct {
	ln *net.UnixListener
	// Errorf reports per-connection errors; nil discards them.
	Errorf func(format string, args ...any)

	wg sync.WaitGroup
	// mu guards conns.
	mu    sync.Mutex
	conns map[*net.UnixConn]struct{}
}

// Listen creates the socket at path (removing a stale one) with mode 0600.
func Listen(path string) (*Server, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return &Server{ln: ln, conns: make(map[*net.UnixConn]struct{})}, nil
}

// Close closes the socket: Serve, if running, returns accept's error.
func (s *Server) Close() error { return s.ln.Close() }

// Addr returns the socket's path.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve accepts connections until ctx is cancelled or accepting fails, and
// calls h for each message. It closes the socket and every open connection
// before returning, after the handlers in progress have returned.
func (s *Server) Serve(ctx context.Context, h Handler) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	defer s.closeAll()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("accept: %w", err)
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.forget(c)
			m, err := ReadMessage(c)
			if err != nil {
				s.logf("listener: %v", err)
				return
			}
			if err := h(ctx, m); err != nil {
				s.logf("listener: container %s pid %d: %v", m.State.State.ID, m.State.Pid, err)
			}
		}()
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.Errorf != nil {
		s.Errorf(format, args...)
	}
}

// forget closes c: runc keeps its end open, but there is nothing more to
// read from it.
func (s *Server) forget(c *net.UnixConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *Server) closeAll() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// ReadMessage reads one ContainerProcessState and its fds from c. It
// returns as soon as the JSON is complete, without waiting for EOF. Fds
// beyond the named ones, and all fds on error, are closed.
func ReadMessage(c *net.UnixConn) (*Message, error) {
	if err := c.SetReadDeadline(time.Now().Add(ReadTimeout)); err != nil {
		return nil, err
	}
	var (
		data []byte
		fds  []int
		buf  = make([]byte, 64<<10)
		oob  = make([]byte, unix.CmsgSpace(MaxFds*4))
	)
	closeFds := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	for {
		n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
		n, oobn = max(n, 0), max(oobn, 0) // -1 on a connection closed under the read
		if oobn > 0 {
			got, perr := parseRights(oob[:oobn])
			fds = append(fds, got...)
			if perr != nil && err == nil {
				err = perr
			}
		}
		if err == nil && flags&unix.MSG_CTRUNC != 0 {
			err = errors.New("control message truncated: too many fds")
		}
		data = append(data, buf[:n]...)
		if err == nil && len(data) > MaxMessage {
			err = fmt.Errorf("message above %d bytes", MaxMessage)
		}
		if err == nil && n == 0 {
			err = errors.New("connection closed before a complete message")
		}
		if err != nil {
			closeFds()
			return nil, fmt.Errorf("read state: %w", err)
		}
		// runc writes the state in one sendmsg; a stream socket may still
		// split it, so parse once the bytes form a complete JSON value.
		if !json.Valid(data) {
			continue
		}
		var st ContainerProcessState
		if err := json.Unmarshal(data, &st); err != nil {
			closeFds()
			return nil, fmt.Errorf("decode state: %w", err)
		}
		if len(st.Fds) != len(fds) {
			closeFds()
			return nil, fmt.Errorf("state names %d fds, got %d", len(st.Fds), len(fds))
		}
		m := &Message{State: st, Files: make(map[string]*os.File, len(fds))}
		for i, fd := range fds {
			name := st.Fds[i]
			if _, dup := m.Files[name]; dup {
				unix.Close(fd)
				continue
			}
			unix.CloseOnExec(fd)
			m.Files[name] = os.NewFile(uintptr(fd), name)
		}
		return m, nil
	}
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// Send sends st and fds over c as runc does: one sendmsg carrying the JSON
// and the fds as SCM_RIGHTS. The test harness uses it to stand in for
// runc.
func Send(c *net.UnixConn, st *ContainerProcessState, fds ...int) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, _, err = c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	if err != nil {
		return fmt.Errorf("send state: %w", err)
	}
	return nil
}
