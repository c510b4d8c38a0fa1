package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
)

// Source builds the snapshot the metrics read: counts, limits and
// bounds (a Query's CountsOnly), no lists.
type Source func() control.Snapshot

// StateSource builds the snapshot a query asks for (GET /v1/state). It
// copies what it returns under the engines' locks, a bounded page at a
// time; the answer is encoded after, with no engine lock held.
type StateSource func(control.Query) (control.Snapshot, error)

// Server is a shim's control endpoint.
type Server struct {
	path string
	ln   net.Listener
	srv  *http.Server
}

// Listen opens the control socket at path (making Dir if needed; a stale
// socket of a dead shim with the same id is replaced) and serves the
// snapshots of src, and the metrics of reg when it is not nil, until
// Close.
func Listen(path string, src StateSource, reg *prometheus.Registry) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, r *http.Request) {
		q, err := control.ParseQuery(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		snap, err := src(q)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		// Not indented: a set's page of semaphores would double in size.
		_ = json.NewEncoder(w).Encode(snap)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	s := &Server{path: path, ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Path returns the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	os.Remove(s.path)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
