package msgengine

import (
	"bytes"
	"fmt"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// procHeader is the first line of /proc/sysvipc/msg.
const procHeader = "       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      ctime\n"

// procFormat is one row of /proc/sysvipc/msg (sysvipc_msg_proc_show).
const procFormat = "%10d %10d  %4o  %10d %10d %5d %5d %5d %5d %5d %5d %10d %10d %10d\n"

// ProcSysvipc returns the namespace's /proc/sysvipc/msg in the kernel's
// exact format, with lspid and lrpid as seen from pid namespace pidns (the
// reader's /proc). util-linux ipcs and lsipc read this file.
func (e *Engine) ProcSysvipc(pidns *ipcns.PidNamespace) []byte {
	var b bytes.Buffer
	b.WriteString(procHeader)
	for _, q := range e.ids.All() {
		q.mu.Lock()
		if !q.Deleted() {
			p := q.Perm()
			fmt.Fprintf(&b, procFormat, p.Key, q.ID(), p.Mode, q.cbytes.Load(), q.qnum.Load(),
				q.lspid.In(pidns), q.lrpid.In(pidns), p.UID, p.GID, p.CUID, p.CGID, q.stime, q.rtime, q.ctime)
		}
		q.mu.Unlock()
	}
	return b.Bytes()
}
