// Command ipcctl shows, for every container and pod served by the
// containerd-shim-ipc shims on this node, their System V IPC objects, who
// waits on what, and the SEM_UNDO entries; and the shims' metrics.
//
//	ipcctl [-json] [-pod NAME] [-container ID] [show]   objects, waiters, undo (default)
//	ipcctl [-json] [-limit N] [-offset N] [show]       the sets and queues from the N-th
//	ipcctl [-json] -set ID [-ns INODE] [-offset N]      a set's semaphores, -limit of them
//	ipcctl [-json] waiters                              only the sleepers
//	ipcctl [-container ID | -pod NAME] socket           the control socket(s), one a line
//	ipcctl metrics                                      every shim's metrics, merged (Prometheus text)
//	ipcctl exporter -listen 127.0.0.1:9863              serve them for a node-level scrape
//
// Without -set it shows summaries: each set's header (nsems, waiters, undo
// entries, times), not its semaphores' values, and at most -limit sets,
// queues, waiters and undo entries per namespace (it says when it cut a
// list). -set ID shows that set's semaphores, a page of -limit from
// -offset, and its undo entries' adjustments of them.
//
// It finds the shims by their control sockets in
// /run/containerd-shim-ipc/control (see package shim/control); the
// sockets are named by a hash of the shim's working directory (its first
// container's bundle), so `ipcctl -container ID socket` is how to find
// the one serving a container. It needs root, like the sockets.
//
// Exit status: 0 when something was shown; 1 on an error (no shim that
// was asked answered); 2 on a usage error (a flag the command does not
// take, a number out of range, a -container matching containers of
// several namespaces); 3 when no
// shim serves System V IPC on the node (nothing running); 4 when shims
// run but none holds the -pod, -container or -set asked for (not found).
// metrics exits 0, 1 or 3 alike. What went wrong is said on stderr;
// stdout carries only what was asked for.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
)

// Output is what -json prints.
type Output struct {
	Shims  []control.Snapshot `json:"shims"`
	Errors []SocketError      `json:"errors,omitempty"`
}

// SocketError is a control socket that did not answer (a shim killed
// without cleanup leaves one).
type SocketError struct {
	Socket string `json:"socket"`
	Error  string `json:"error"`
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is ipcctl with args, writing to stdout and stderr; it returns the
// exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ipcctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", control.Dir, "directory of the shims' control sockets")
	asJSON := fs.Bool("json", false, "print JSON (for scripts) instead of tables")
	pod := fs.String("pod", "", "only the engine namespace of this pod (name or namespace/name)")
	ctr := fs.String("container", "", "only the engine namespace this container (id, id prefix or CRI name; one namespace's) is in")
	listen := fs.String("listen", "127.0.0.1:9863", "exporter: address to serve /metrics on")
	timeout := fs.Duration("timeout", 5*time.Second, "per-shim timeout")
	set := fs.Int("set", -1, "show the semaphores of the set with this id (a page of -limit from -offset)")
	ns := fs.Uint64("ns", 0, "only the engine namespace of this IPC namespace inode")
	offset := fs.Int("offset", 0, "with -set: the first semaphore shown; without: the first set and queue listed")
	limit := fs.Int("limit", 0, fmt.Sprintf("cap of each list per namespace, and of a set's page (default %d, at most %d)", control.DefaultLimit, control.MaxLimit))
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitShown
		}
		return exitUsage
	}
	cmd := "show"
	if fs.NArg() > 0 {
		cmd = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil { // flags after the command
			if errors.Is(err, flag.ErrHelp) {
				return exitShown
			}
			return exitUsage
		}
		if fs.NArg() > 0 {
			return usageError(fs, fmt.Sprintf("unexpected argument %q after %s", fs.Arg(0), cmd))
		}
	}
	allowed, ok := commandFlags[cmd]
	if !ok {
		return usageError(fs, fmt.Sprintf("unknown command %q", cmd))
	}
	var badFlag string
	setGiven := false
	fs.Visit(func(f *flag.Flag) {
		if !strings.Contains(" "+allowed+" ", " "+f.Name+" ") && badFlag == "" {
			badFlag = f.Name
		}
		setGiven = setGiven || f.Name == "set"
	})
	switch {
	case badFlag != "":
		return usageError(fs, fmt.Sprintf("-%s does not apply to %s", badFlag, cmd))
	case *offset < 0 || *offset > math.MaxInt32:
		return usageError(fs, fmt.Sprintf("-offset %d: want a number from 0 to %d", *offset, math.MaxInt32))
	case *limit < 0 || *limit > math.MaxInt32:
		return usageError(fs, fmt.Sprintf("-limit %d: want a number from 0 (the default) to %d", *limit, math.MaxInt32))
	case setGiven && (*set < 0 || *set > math.MaxInt32):
		return usageError(fs, fmt.Sprintf("-set %d: semaphore set ids are from 0 to %d", *set, math.MaxInt32))
	case *timeout <= 0:
		return usageError(fs, fmt.Sprintf("-timeout %v: want a duration > 0", *timeout))
	}
	switch cmd {
	case "show", "waiters", "socket":
		q := control.Query{NS: *ns, Offset: *offset, Limit: *limit}
		if setGiven {
			q.Set, q.HasSet = int32(*set), true
		}
		out, err := collect(*dir, *timeout, q)
		if err != nil {
			return fatal(stderr, err)
		}
		running := len(out.Shims) > 0
		filter(&out, *pod, *ctr)
		if which := ambiguous(&out, *ctr); len(which) > 0 {
			return usageError(fs, fmt.Sprintf("-container %s: containers of %d namespaces match (%s): give more of an id, or -pod", *ctr, len(which), strings.Join(which, "; ")))
		}
		switch {
		case cmd == "socket":
			// One line per shim: the control socket to curl.
			for _, s := range out.Shims {
				fmt.Fprintln(stdout, s.Shim.Socket)
			}
		case *asJSON:
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(out); err != nil {
				return fatal(stderr, err)
			}
		default:
			printTables(stdout, &out, cmd == "waiters")
		}
		return showStatus(stderr, &out, showQuery{running: running, json: *asJSON, pod: *pod, ctr: *ctr, set: q.Set, hasSet: q.HasSet})
	case "metrics":
		n, err := writeMetrics(stdout, stderr, *dir, *timeout)
		if err != nil {
			return fatal(stderr, err)
		}
		if n == 0 {
			fmt.Fprintln(stderr, "ipcctl: no shim serves System V IPC on this node")
			return exitNothing
		}
		return exitShown
	default: // exporter
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fatal(stderr, fmt.Errorf("exporter: %w", err))
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
			var b bytes.Buffer
			if _, err := writeMetrics(&b, stderr, *dir, *timeout); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
			_, _ = w.Write(b.Bytes())
		})
		fmt.Fprintf(stderr, "ipcctl: serving the shims' metrics on http://%s/metrics\n", ln.Addr())
		return fatal(stderr, http.Serve(ln, mux))
	}
}

// usageText heads -h and every usage error.
const usageText = `usage: ipcctl [flags] [show|waiters|socket|metrics|exporter] [flags]

  show      every engine namespace: usage, limits, sets, queues, waiters,
            undo entries (the default; -set ID: that set's semaphores)
  waiters   only who waits on what
  socket    the control socket of each shim shown, one a line
  metrics   every shim's metrics, merged (Prometheus text)
  exporter  serve them on http://-listen/metrics

exit status: 0 something shown; 1 an error (no shim asked answered);
2 a usage error; 3 no shim serves System V IPC on this node (nothing
running); 4 shims run but none holds the -pod, -container or -set asked
for (not found)

flags:
`

// commandFlags lists the flags each command takes.
var commandFlags = map[string]string{
	"show":     "dir timeout json pod container ns set offset limit",
	"waiters":  "dir timeout json pod container ns offset limit",
	"socket":   "dir timeout pod container ns",
	"metrics":  "dir timeout",
	"exporter": "dir timeout listen",
}

// Exit statuses (see the package comment).
const (
	exitError    = 1
	exitUsage    = 2
	exitNothing  = 3
	exitNotFound = 4
	exitShown    = 0
)

// showQuery is what showStatus needs of the query: whether any shim
// answered, and what was asked for.
type showQuery struct {
	running, json bool
	pod, ctr      string
	set           int32
	hasSet        bool
}

// showStatus is the exit status of show, waiters and socket: nothing
// running, every shim failing, not found, or shown. It says on stderr
// what went wrong (the sockets that did not answer, unless -json carries
// them) and what was not found.
func showStatus(stderr io.Writer, out *Output, q showQuery) int {
	if !q.json {
		for _, e := range out.Errors {
			fmt.Fprintf(stderr, "ipcctl: %s: no answer (%s)\n", e.Socket, e.Error)
		}
	}
	switch {
	case !q.running && len(out.Errors) > 0:
		fmt.Fprintf(stderr, "ipcctl: none of the %d shims' control sockets answered\n", len(out.Errors))
		return exitError
	case !q.running:
		fmt.Fprintln(stderr, "ipcctl: no shim serves System V IPC on this node")
		return exitNothing
	case len(out.Shims) == 0 && (q.pod != "" || q.ctr != ""):
		what := "container " + q.ctr
		if q.pod != "" {
			what = "pod " + q.pod
		}
		fmt.Fprintf(stderr, "ipcctl: no shim serves %s\n", what)
		return exitNotFound
	case q.hasSet && !hasSet(out, q.set):
		fmt.Fprintf(stderr, "ipcctl: no semaphore set %d in the namespaces shown\n", q.set)
		return exitNotFound
	}
	return exitShown
}

// hasSet reports whether some namespace in out holds semaphore set id.
func hasSet(out *Output, id int32) bool {
	for _, s := range out.Shims {
		for _, n := range s.Namespaces {
			for _, ss := range n.SemSets {
				if ss.ID == id {
					return true
				}
			}
		}
	}
	return false
}

// usageError names what was wrong and prints the usage; it returns 2.
func usageError(fs *flag.FlagSet, msg string) int {
	fmt.Fprintf(fs.Output(), "ipcctl: %s\n", msg)
	fs.Usage()
	return exitUsage
}

// fatal reports err; it returns 1.
func fatal(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "ipcctl:", err)
	return exitError
}

func collect(dir string, timeout time.Duration, q control.Query) (Output, error) {
	out := Output{Shims: []control.Snapshot{}}
	socks, err := control.Sockets(dir)
	if err != nil {
		return out, err
	}
	for _, s := range socks {
		snap, err := control.NewClient(s, timeout).StateQuery(q)
		if err != nil {
			out.Errors = append(out.Errors, SocketError{Socket: s, Error: err.Error()})
			continue
		}
		out.Shims = append(out.Shims, *snap)
	}
	return out, nil
}

func filter(out *Output, pod, ctr string) {
	if pod == "" && ctr == "" {
		return
	}
	var shims []control.Snapshot
	for _, s := range out.Shims {
		var keep []control.NamespaceState
		for _, n := range s.Namespaces {
			if matchPod(n.Pod, pod) && matchCtr(n.Containers, ctr) {
				keep = append(keep, n)
			}
		}
		if len(keep) > 0 {
			s.Namespaces = keep
			shims = append(shims, s)
		}
	}
	out.Shims = append([]control.Snapshot{}, shims...)
}

// ambiguous describes the namespaces left in out, when -container
// (ctr) left more than one: the value, an id prefix or a CRI name (which
// repeats across a Deployment's pods), named containers of several, and
// socket or show would answer for all of them. Containers of one pod share
// its namespace: a prefix of two of them is not ambiguous.
func ambiguous(out *Output, ctr string) []string {
	if ctr == "" {
		return nil
	}
	var which []string
	for _, s := range out.Shims {
		for _, n := range s.Namespaces {
			var ids []string
			for _, c := range n.Containers {
				if strings.HasPrefix(c.ID, ctr) || c.Name == ctr {
					ids = append(ids, short(c.ID))
				}
			}
			where := fmt.Sprintf("ipc ns %d", n.Inode)
			if n.Pod != nil {
				where = "pod " + n.Pod.Namespace + "/" + n.Pod.Name
			}
			which = append(which, where+": "+strings.Join(ids, ", "))
		}
	}
	if len(which) < 2 {
		return nil
	}
	sort.Strings(which)
	return which
}

func matchPod(p *control.Pod, want string) bool {
	if want == "" {
		return true
	}
	if p == nil {
		return false
	}
	return p.Name == want || p.Namespace+"/"+p.Name == want
}

func matchCtr(cs []control.Container, want string) bool {
	if want == "" {
		return true
	}
	for _, c := range cs {
		if strings.HasPrefix(c.ID, want) || c.Name == want {
			return true
		}
	}
	return false
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func ctrName(n *control.NamespaceState, id string) string {
	for _, c := range n.Containers {
		if c.ID == id {
			if c.Name != "" {
				return c.Name
			}
			if c.Sandbox {
				return "(sandbox)"
			}
		}
	}
	return short(id)
}

func pidStr(n *control.NamespaceState, p *control.Pid) string {
	if p == nil || p.Host == 0 && p.Container == 0 {
		return "-"
	}
	s := fmt.Sprintf("%d/%d", p.Host, p.Container)
	if p.ContainerID != "" {
		s += "@" + ctrName(n, p.ContainerID)
	}
	return s
}

// printTables writes out's namespaces as tables (none when no shim
// answered: showStatus says on stderr what was not there).
func printTables(w io.Writer, out *Output, waitersOnly bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	for _, s := range out.Shims {
		for i := range s.Namespaces {
			n := &s.Namespaces[i]
			title := "containers"
			if n.Pod != nil {
				title = fmt.Sprintf("pod %s/%s", n.Pod.Namespace, n.Pod.Name)
			}
			var ids []string
			for _, c := range n.Containers {
				ids = append(ids, ctrName(n, c.ID)+"="+short(c.ID))
			}
			fmt.Fprintf(tw, "== %s  ipc ns %d  shim pid %d  [%s]\n", title, n.Inode, s.Shim.Pid, strings.Join(ids, " "))
			u, b, l := &n.Usage, &n.Bounds, &n.Limits
			fmt.Fprintf(tw, "   usage: %d/%d sets, %d/%d sems, %d/%d queues, %d msgs %d bytes (reserved %d of %d); %d waiters, %d undo entries; worst-case state %s\n",
				u.Sets, b.MaxSets, u.Semaphores, b.MaxSemaphores, u.Queues, b.MaxQueues, u.Messages, u.Bytes, u.ReservedBytes, b.MaxMsgBytes,
				u.Waiters, u.UndoEntries, human(b.MaxStateBytes))
			fmt.Fprintf(tw, "   limits: kernel.sem=%d %d %d %d msgmax=%d msgmnb=%d msgmni=%d\n", l.SemMSL, l.SemMNS, l.SemOPM, l.SemMNI, l.MsgMax, l.MsgMNB, l.MsgMNI)
			if !waitersOnly {
				if len(n.SemSets) > 0 {
					fmt.Fprintln(tw, "\n   Semaphore Arrays\n   key\tsemid\towner\tperms\tnsems\twaiters\tundo\totime\tctime")
					for _, ss := range n.SemSets {
						fmt.Fprintf(tw, "   0x%08x\t%d\t%d\t%o\t%d\t%d\t%d\t%s\t%s\n", uint32(ss.Perm.Key), ss.ID, ss.Perm.UID, ss.Perm.Mode, ss.Nsems,
							ss.Waiters, ss.Undos, when(ss.Otime), when(ss.Ctime))
					}
					for _, ss := range n.SemSets {
						if ss.Sems == nil {
							continue
						}
						fmt.Fprintf(tw, "\n   Semaphores %d-%d of %d of set %d\n   semnum\tvalue\tsempid (host/ctr@container)\tncnt\tzcnt\n",
							ss.SemsOffset, ss.SemsOffset+len(ss.Sems)-1, ss.Nsems, ss.ID)
						for i, sm := range ss.Sems {
							fmt.Fprintf(tw, "   %d\t%d\t%s\t%d\t%d\n", ss.SemsOffset+i, sm.Val, pidStr(n, sm.Pid), sm.Ncnt, sm.Zcnt)
						}
					}
				}
				if len(n.Queues) > 0 {
					fmt.Fprintln(tw, "\n   Message Queues\n   key\tmsqid\towner\tperms\tmessages\tused-bytes\tqbytes\tlspid\tlrpid\tsenders\treceivers")
					for _, q := range n.Queues {
						fmt.Fprintf(tw, "   0x%08x\t%d\t%d\t%o\t%d\t%d\t%d\t%s\t%s\t%d\t%d\n", uint32(q.Perm.Key), q.ID, q.Perm.UID, q.Perm.Mode,
							q.Messages, q.Bytes, q.Qbytes, pidStr(n, q.Lspid), pidStr(n, q.Lrpid), q.Senders, q.Receivers)
					}
				}
			}
			if len(n.Waiters) > 0 {
				fmt.Fprintln(tw, "\n   Waiting\n   pid (host/ctr)\tcontainer\tcall\tkey\tid\twaits on\tfor")
				for _, wt := range n.Waiters {
					fmt.Fprintf(tw, "   %d/%d\t%s\t%s\t0x%08x\t%d\t%s\t%s\n", wt.Pid.Host, wt.Pid.Container, ctrName(n, wt.Pid.ContainerID),
						wt.Kind, uint32(wt.Key), wt.ID, what(&wt), (time.Duration(wt.Seconds * 1e9)).Round(time.Millisecond))
				}
			} else {
				fmt.Fprintln(tw, "\n   nobody waits")
			}
			if !waitersOnly && len(n.Undo) > 0 {
				fmt.Fprintln(tw, "\n   Undo entries (applied at exit)\n   pid (host/ctr)\tcontainer\tkey\tsemid\tadjustments")
				for _, un := range n.Undo {
					var adj []string
					for i, a := range un.Adj {
						if a != 0 {
							adj = append(adj, fmt.Sprintf("sem%d%+d", un.AdjOffset+i, a))
						}
					}
					if len(adj) == 0 {
						adj = []string{"none"}
					}
					if un.AdjTruncated {
						adj = append(adj, fmt.Sprintf("(sems from %d: -set %d)", un.AdjOffset+len(un.Adj), un.SemID))
					}
					fmt.Fprintf(tw, "   %d/%d\t%s\t0x%08x\t%d\t%s\n", un.Pid.Host, un.Pid.Container, ctrName(n, un.Pid.ContainerID),
						uint32(un.Key), un.SemID, strings.Join(adj, " "))
				}
			}
			if len(n.Truncated) > 0 {
				fmt.Fprintf(tw, "\n   cut at the limit: %s (the usage line counts them all; -limit N and -offset N show more)\n", strings.Join(n.Truncated, ", "))
			}
			fmt.Fprintln(tw)
		}
	}
}

func what(w *control.Waiter) string {
	switch w.Kind {
	case "semop":
		var ops []string
		for i, op := range w.Sops {
			s := fmt.Sprintf("sem%d%+d", op.Num, op.Op)
			if op.Op == 0 {
				s = fmt.Sprintf("sem%d==0", op.Num)
			}
			if op.Flg&0x1000 != 0 {
				s += "(undo)"
			}
			if i == w.Blocking && len(w.Sops) > 1 {
				s = "[" + s + "]"
			}
			ops = append(ops, s)
		}
		return strings.Join(ops, " ")
	case "msgsnd":
		return fmt.Sprintf("room for %d bytes (type %d)", w.Size, w.Type)
	default:
		switch w.Mode {
		case "any":
			return fmt.Sprintf("any message (msgsz %d)", w.Size)
		case "equal":
			return fmt.Sprintf("type %d (msgsz %d)", w.Type, w.Size)
		case "except":
			return fmt.Sprintf("type != %d (msgsz %d)", w.Type, w.Size)
		case "lessequal":
			return fmt.Sprintf("type <= %d (msgsz %d)", -w.Type, w.Size)
		}
		return fmt.Sprintf("%s %d (msgsz %d)", w.Mode, w.Type, w.Size)
	}
}

func when(t int64) string {
	if t == 0 {
		return "never"
	}
	return time.Unix(t, 0).Format("15:04:05")
}

func human(n int64) string {
	const u = 1024
	if n < u {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(u), 0
	for m := n / u; m >= u; m /= u {
		div *= u
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// writeMetrics merges the metrics of every shim: families by name, the
// series of each shim kept (their ipc_ns and shim_pid labels differ). It
// returns how many shims answered; none of several is an error.
func writeMetrics(w, stderr io.Writer, dir string, timeout time.Duration) (shims int, err error) {
	socks, err := control.Sockets(dir)
	if err != nil {
		return 0, err
	}
	fams := map[string]*dto.MetricFamily{}
	for _, s := range socks {
		b, err := control.NewClient(s, timeout).Get("/metrics")
		if err != nil {
			fmt.Fprintf(stderr, "ipcctl: %s: %v\n", s, err)
			continue
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
		if err != nil {
			fmt.Fprintf(stderr, "ipcctl: %s: %v\n", s, err)
			continue
		}
		shims++
		for name, mf := range mfs {
			if have := fams[name]; have != nil {
				have.Metric = append(have.Metric, mf.Metric...)
			} else {
				fams[name] = mf
			}
		}
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, err := expfmt.MetricFamilyToText(w, fams[n]); err != nil {
			return shims, err
		}
	}
	if shims == 0 && len(socks) > 0 {
		return 0, fmt.Errorf("none of the %d shims' control sockets answered", len(socks))
	}
	return shims, nil
}
