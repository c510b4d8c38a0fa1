package task

import (
	"net"
	"path/filepath"
	"testing"
)

func TestListening(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if !listening(p) {
		t.Fatal("a listening socket is not seen")
	}
	l.Close()
	if listening(p) {
		t.Fatal("a socket file without a listener is seen as live (a stale registry record)")
	}
}
