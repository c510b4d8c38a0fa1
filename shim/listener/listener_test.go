package listener

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair returns the two ends of a connected unix stream socket.
func pair(t *testing.T) (server, client *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// openFds counts the process's open fds.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// pipeFds returns n fds to send (pipe ends), closed at the test's end.
func pipeFds(t *testing.T, n int) []int {
	t.Helper()
	var fds []int
	for len(fds) < n {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, p[0], p[1])
	}
	for _, fd := range fds[n:] {
		unix.Close(fd)
	}
	fds = fds[:n]
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return fds
}

// chunks cuts b into pieces of n bytes.
func chunks(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

func state(fds ...string) *ContainerProcessState {
	return &ContainerProcessState{Version: "1.0.2", Fds: fds, Pid: 42,
		State: State{Version: "1.0.2", ID: "ctr", Status: "creating", Pid: 42, Bundle: "/b"}}
}

// readCase sends raw (in pieces, fds with the first) and reads it back.
func readCase(t *testing.T, fds []int, pieces ...[]byte) (*Message, error) {
	t.Helper()
	s, c := pair(t)
	defer s.Close()
	defer c.Close()
	go func() {
		for i, p := range pieces {
			var oob []byte
			if i == 0 && len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			// One sendmsg per piece, as runc does; a stream socket may
			// take part of it (WriteMsgUnix does not loop): the rest
			// follows.
			n, _, err := c.WriteMsgUnix(p, oob, nil)
			if err != nil {
				return
			}
			if _, err := c.Write(p[n:]); err != nil {
				return
			}
		}
		c.CloseWrite()
	}()
	return ReadMessage(s)
}

func TestReadMessage(t *testing.T) {
	fds := pipeFds(t, 1)
	b, _ := json.Marshal(state(SeccompFdName))
	m, err := readCase(t, fds, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.SeccompFile().Close()
	if m.State.State.ID != "ctr" || m.State.Pid != 42 || m.SeccompFile() == nil {
		t.Fatalf("got %+v", m)
	}
	// The fd received is the pipe: same inode.
	var a, g unix.Stat_t
	unix.Fstat(fds[0], &a)
	unix.Fstat(int(m.SeccompFile().Fd()), &g)
	if a.Ino != g.Ino {
		t.Fatal("received fd is not the one sent")
	}
}

// A stream socket may split runc's one sendmsg: the message is parsed
// once the bytes form a complete JSON value.
func TestReadMessageSplit(t *testing.T) {
	fds := pipeFds(t, 1)
	b, _ := json.Marshal(state(SeccompFdName))
	m, err := readCase(t, fds, b[:7], b[7:30], b[30:])
	if err != nil {
		t.Fatal(err)
	}
	m.SeccompFile().Close()
}

// Every malformed message is an error, and no fd received stays open.
func TestReadMessageMalformed(t *testing.T) {
	good, _ := json.Marshal(state(SeccompFdName))
	two, _ := json.Marshal(state(SeccompFdName, "other"))
	big, _ := json.Marshal(&ContainerProcessState{Fds: []string{SeccompFdName},
		State: State{Annotations: map[string]string{"a": strings.Repeat("x", MaxMessage)}}})
	cases := []struct {
		name   string
		nfds   int
		pieces [][]byte
		want   string
	}{
		{"fewer fds than named", 0, [][]byte{good}, "names 1 fds, got 0"},
		{"more fds than named", 2, [][]byte{good}, "names 1 fds, got 2"},
		{"names two, sends one", 1, [][]byte{two}, "names 2 fds, got 1"},
		{"too many fds", MaxFds + 4, [][]byte{good}, "too many fds"},
		{"closed midway", 1, [][]byte{good[:10]}, "EOF"},
		{"closed at once", 0, nil, "EOF"},
		{"valid JSON, wrong shape", 1, [][]byte{[]byte(`["not","a","state"]`)}, "decode state"},
		{"never valid JSON", 1, [][]byte{[]byte(`{"ociVersion": nope}`)}, "EOF"},
		{"oversize", 1, chunks(big, 64<<10), "above"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var fds []int
			if c.nfds > 0 {
				fds = pipeFds(t, c.nfds)
			}
			before := openFds(t)
			pieces := c.pieces
			if pieces == nil {
				pieces = [][]byte{}
			}
			m, err := readCase(t, fds, pieces...)
			if err == nil {
				for _, f := range m.Files {
					f.Close()
				}
				t.Fatalf("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want %q", err, c.want)
			}
			if after := openFds(t); after != before {
				t.Fatalf("%d fds open after, %d before: received fds leaked", after, before)
			}
		})
	}
}

// Two fds with the same name: the first is kept, the second closed.
func TestReadMessageDuplicateName(t *testing.T) {
	fds := pipeFds(t, 2)
	b, _ := json.Marshal(state(SeccompFdName, SeccompFdName))
	before := openFds(t)
	m, err := readCase(t, fds, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 1 {
		t.Fatalf("%d files", len(m.Files))
	}
	if got := openFds(t); got != before+1 {
		t.Fatalf("%d fds open, want %d (one kept)", got, before+1)
	}
	m.SeccompFile().Close()
}

// Serve hands each message to the handler; a peer that connects and says
// nothing does not keep Serve from returning when its context ends.
func TestServe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.sock")
	srv, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *Message, 1)
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(ctx, func(ctx context.Context, m *Message) error {
			got <- m
			return nil
		})
	}()
	dial := func() *net.UnixConn {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	silent := dial()
	defer silent.Close()
	c := dial()
	defer c.Close()
	fds := pipeFds(t, 1)
	if err := Send(c, state(SeccompFdName), fds...); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		m.SeccompFile().Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no message handled")
	}
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return with a silent peer connected")
	}
	// A stale socket is replaced by the next Listen.
	srv2, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	srv2.ln.Close()
}
