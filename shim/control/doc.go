// Package control is the wire side of the shim's read-only control
// endpoint: the types of its answers, the query, the socket paths and the
// client ipcctl uses. The server and the metrics, which need the gateway
// and the engines, are in package serve; a client links neither.
//
// # Discovery and transport
//
// Each shim process listens on a unix socket
// /run/containerd-shim-ipc/control/<id>.sock (Dir; <id> is the same hash
// that names the shim's seccomp listener socket, so one shim has one of
// each) and serves HTTP/1.1 on it:
//
//	GET /v1/state    the Snapshot below, as JSON: summaries (Query)
//	GET /v1/state?set=ID[&ns=INODE][&offset=N][&limit=N]
//	                 set ID's semaphores, a page of them
//	GET /v1/state?limit=N[&offset=N]
//	                 lists of N entries, sets and queues from the N-th
//	GET /metrics     Prometheus text format (client_golang)
//	GET /healthz     "ok"
//
// A read costs what it asks for, not what the namespaces hold: the
// default answer is each namespace's counts and at most DefaultLimit
// set headers, queues, waiters and undo entries (Truncated names the lists
// cut); a set's semaphores are copied only for its page; /metrics reads
// counts only (docs/bench-host.md has the figures).
//
// ipcctl lists Dir, dials each socket and merges the answers; a socket
// nobody answers on (a shim killed without cleanup) is reported and
// skipped. The directory is 0700 and the sockets 0600: only root on the
// host reads IPC keys, pids and queue contents' sizes, as only root can
// read another IPC namespace's /proc/sysvipc.
//
// Why JSON over HTTP and not ttrpc: the endpoint is read-only and queried
// by people and scripts, not by containerd; `curl --unix-socket` works on
// it with nothing else installed, the same server carries the Prometheus
// text format (which is HTTP), and there is no protobuf to generate and
// version. The snapshot is bounded (a page of objects and sleepers of one
// shim's pods) and built only when asked, never on the trapped path.
//
// # Metrics
//
// A Prometheus server cannot scrape a unix socket, and a node runs one
// shim per pod, so no shim opens a TCP port: `ipcctl metrics` prints the
// merged metrics of every shim on the node, and `ipcctl exporter -listen
// ADDR` serves them over HTTP for a node-level scrape (run it from a
// DaemonSet with hostPID and /run mounted). Every series carries the
// engine namespace's labels (ipc_ns inode, pod, pod_namespace), so the
// shims' series never collide.
package control

import "path/filepath"

// Dir is where the shims' control sockets live.
const Dir = "/run/containerd-shim-ipc/control"

// SocketPath returns the control socket of the shim whose seccomp
// listener socket is listenerSock (/run/containerd-shim-ipc/<id>.sock).
func SocketPath(listenerSock string) string {
	return filepath.Join(Dir, filepath.Base(listenerSock))
}
