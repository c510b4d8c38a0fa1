package semengine

import (
	"bytes"
	"fmt"
)

// procHeader is the first line of /proc/sysvipc/sem.
const procHeader = "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n"

// ProcSysvipc returns the namespace's /proc/sysvipc/sem, in the kernel's
// exact format (sysvipc_sem_proc_show), the file util-linux ipcs and
// lsipc read. uids are as the engine stores them.
func (e *Engine) ProcSysvipc() []byte {
	var b bytes.Buffer
	b.WriteString(procHeader)
	for _, s := range e.ids.All() {
		s.lockAll()
		if !s.Deleted() {
			p := s.Perm()
			fmt.Fprintf(&b, "%10d %10d  %4o %10d %5d %5d %5d %5d %10d %10d\n",
				p.Key, s.ID(), p.Mode, len(s.sems), p.UID, p.GID, p.CUID, p.CGID, s.otimeLocked(), s.ctime)
		}
		s.unlock(-1)
	}
	return b.Bytes()
}
