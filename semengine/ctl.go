package semengine

import (
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
	"golang.org/x/sys/unix"
)

// The semctl commands, one method per group of the kernel's ksys_semctl.
// Each checks semid < 0 first (EINVAL), as ksys_semctl does for every
// command, and then follows its kernel function's order.

// Info is semctl IPC_INFO or SEM_INFO: the limits, and for SEM_INFO the
// sets and semaphores in use in semusz and semaem. It returns the highest
// index in use (0 when there is none).
func (e *Engine) Info(semid int32, cmd int) (Seminfo, int, error) {
	if semid < 0 {
		return Seminfo{}, 0, unix.EINVAL
	}
	lim := e.ns.Limits()
	si := Seminfo{
		Semmni: int32(lim.SemMNI), Semmns: int32(lim.SemMNS), Semmsl: int32(lim.SemMSL),
		Semopm: int32(lim.SemOPM), Semvmx: ipcns.SemVMX, Semmnu: ipcns.SemMNU,
		Semmap: ipcns.SemMAP, Semume: ipcns.SemUME,
		Semusz: ipcns.SemUSZ, Semaem: ipcns.SemAEM,
	}
	if cmd == SemInfo {
		si.Semusz = int32(e.ids.InUse())
		si.Semaem = int32(e.usedSems.Load())
	}
	return si, max(e.ids.MaxIndex(), 0), nil
}

// Stat is semctl IPC_STAT, SEM_STAT or SEM_STAT_ANY. IPC_STAT takes an id
// and returns 0; the *_STAT commands take an index and return the id.
// SEM_STAT_ANY skips the read permission check.
func (e *Engine) Stat(c *ipcns.Caller, semid int32, cmd int) (SemidDS, int, error) {
	if semid < 0 {
		return SemidDS{}, 0, unix.EINVAL
	}
	var s *Set
	var err error
	if cmd == IPCStat {
		s, err = e.ids.Lookup(semid)
	} else {
		s, err = e.ids.LookupIndex(semid)
	}
	if err != nil {
		return SemidDS{}, 0, err
	}
	if cmd != SemStatAny {
		if err := s.Perm().Check(&c.Creds, ipcns.ReadAccess); err != nil {
			return SemidDS{}, 0, err
		}
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return SemidDS{}, 0, unix.EIDRM
	}
	ds := SemidDS{Perm: *s.Perm(), Otime: s.otimeLocked(), Ctime: s.ctime, Nsems: len(s.sems)}
	if cmd == IPCStat {
		return ds, 0, nil
	}
	return ds, int(s.ID()), nil
}

// IPCStat is the IPC_STAT command number, for Stat.
const IPCStat = ipcns.IPCStat

// otimeLocked is the set's sem_otime: the latest of its semaphores'
// (get_semotime). The caller holds the whole-set lock.
func (s *Set) otimeLocked() int64 {
	var t int64
	for i := range s.sems {
		t = max(t, s.sems[i].otime)
	}
	return t
}

// lookupCtl finds semid and checks access for the semctl_main commands.
func (e *Engine) lookupCtl(c *ipcns.Caller, semid int32, access int) (*Set, error) {
	if semid < 0 {
		return nil, unix.EINVAL
	}
	s, err := e.ids.Lookup(semid)
	if err != nil {
		return nil, err
	}
	if err := s.Perm().Check(&c.Creds, access); err != nil {
		return nil, err
	}
	return s, nil
}

// GetAll is semctl GETALL.
func (e *Engine) GetAll(c *ipcns.Caller, semid int32) ([]uint16, error) {
	s, err := e.lookupCtl(c, semid, ipcns.ReadAccess)
	if err != nil {
		return nil, err
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return nil, unix.EIDRM
	}
	vals := make([]uint16, len(s.sems))
	for i := range s.sems {
		vals[i] = uint16(s.sems[i].val)
	}
	return vals, nil
}

// SetAll is semctl SETALL. read fetches the nsems values from the caller's
// memory; it runs after the permission check and before the set is locked,
// as the kernel's copy_from_user does, and its error (EFAULT) is returned
// as is. Values above SEMVMX give ERANGE. The semaphores' adjustments are
// cleared in every process, and sleepers that can proceed are woken.
func (e *Engine) SetAll(c *ipcns.Caller, semid int32, read func(nsems int) ([]uint16, error)) error {
	s, err := e.lookupCtl(c, semid, ipcns.WriteAccess)
	if err != nil {
		return err
	}
	vals, err := read(len(s.sems))
	if err != nil {
		return err
	}
	if len(vals) != len(s.sems) {
		return unix.EFAULT
	}
	for _, v := range vals {
		if v > ipcns.SemVMX {
			return unix.ERANGE
		}
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return unix.EIDRM
	}
	for i := range s.sems {
		s.sems[i].val = int32(vals[i])
		ipcns.StorePid(&s.sems[i].pid, c.Pid)
	}
	s.undos.Each(func(un *undo.Entry) { clear(un.Adj) })
	s.ctime = now()
	s.update(nil, false)
	return nil
}

// SetVal is semctl SETVAL: ERANGE for a value outside [0, SEMVMX] comes
// before the lookup; then EINVAL (id, semnum), EACCES, EIDRM.
func (e *Engine) SetVal(c *ipcns.Caller, semid int32, semnum int, val int) error {
	if semid < 0 {
		return unix.EINVAL
	}
	if val > ipcns.SemVMX || val < 0 {
		return unix.ERANGE
	}
	s, err := e.ids.Lookup(semid)
	if err != nil {
		return err
	}
	if semnum < 0 || semnum >= len(s.sems) {
		return unix.EINVAL
	}
	if err := s.Perm().Check(&c.Creds, ipcns.WriteAccess); err != nil {
		return err
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return unix.EIDRM
	}
	s.undos.Each(func(un *undo.Entry) { un.Adj[semnum] = 0 })
	sm := &s.sems[semnum]
	sm.val = int32(val)
	ipcns.StorePid(&sm.pid, c.Pid)
	s.ctime = now()
	s.update(nil, false)
	return nil
}

// Get is semctl GETVAL, GETPID, GETNCNT or GETZCNT on semaphore semnum.
// GETPID reports the pid in c's pid namespace, 0 if not visible there.
func (e *Engine) Get(c *ipcns.Caller, semid int32, semnum int, cmd int) (int, error) {
	s, err := e.lookupCtl(c, semid, ipcns.ReadAccess)
	if err != nil {
		return 0, err
	}
	if semnum < 0 || semnum >= len(s.sems) {
		return 0, unix.EINVAL
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return 0, unix.EIDRM
	}
	sm := &s.sems[semnum]
	switch cmd {
	case GetVal:
		return int(sm.val), nil
	case GetPID:
		return int(sm.pid.In(c.PidNS())), nil
	case GetNCnt:
		return s.countLocked(semnum, false), nil
	case GetZCnt:
		return s.countLocked(semnum, true), nil
	}
	return 0, unix.EINVAL
}

// countLocked counts the sleepers waiting on semaphore num: to decrease it,
// or for it to become zero (count_semcnt). A complex operation counts only
// for the operation it is blocked on, as Linux has done since 3.16.
func (s *Set) countLocked(num int, zero bool) int {
	n := 0
	q := &s.sems[num].alter
	if zero {
		q = &s.sems[num].zero
	}
	for w := q.front(); w != nil; w = w.Next() {
		n++
	}
	counts := func(w *waiter) bool {
		op := &w.sops[w.blocking]
		return int(op.Num) == num && (zero && op.Op == 0 || !zero && op.Op < 0)
	}
	for w := s.alter.front(); w != nil; w = w.Next() {
		if counts(w) {
			n++
		}
	}
	if zero {
		for w := s.zero.front(); w != nil; w = w.Next() {
			if counts(w) {
				n++
			}
		}
	}
	return n
}

// SetPerm is semctl IPC_SET: the owner, the creator or CAP_SYS_ADMIN may
// set the uid, gid and permission bits (EPERM otherwise; EINVAL for an
// invalid uid or gid).
func (e *Engine) SetPerm(c *ipcns.Caller, semid int32, uid, gid uint32, mode uint16) error {
	s, err := e.lookupOwner(c, semid)
	if err != nil {
		return err
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return unix.EIDRM
	}
	p, err := s.Perm().Updated(uid, gid, mode)
	if err != nil {
		return err
	}
	s.SetPerm(p)
	s.ctime = now()
	return nil
}

// Remove is semctl IPC_RMID: the set is removed at once, its sleepers fail
// with EIDRM, and every process's undo entry for it is dropped.
func (e *Engine) Remove(c *ipcns.Caller, semid int32) error {
	s, err := e.lookupOwner(c, semid)
	if err != nil {
		return err
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return unix.EIDRM
	}
	s.undos.Each(func(un *undo.Entry) {
		if un.Detach(&s.undos) {
			e.ns.Uncharge(undoBytes(len(un.Adj)))
			e.undoEntries.Add(-1)
		}
	})
	fail := func(q *queue) {
		for w := q.front(); w != nil; {
			next := w.Next()
			s.unlink(w)
			w.finish(int(unix.EIDRM))
			w = next
		}
	}
	fail(&s.zero)
	fail(&s.alter)
	for i := range s.sems {
		fail(&s.sems[i].zero)
		fail(&s.sems[i].alter)
		s.sems[i].pid = nil
	}
	e.ids.Remove(s)
	e.usedSems.Add(-int64(len(s.sems)))
	e.ns.Uncharge(setBytes(len(s.sems)))
	return nil
}

// lookupOwner finds semid for IPC_SET or IPC_RMID (ipcctl_obtain_check).
func (e *Engine) lookupOwner(c *ipcns.Caller, semid int32) (*Set, error) {
	if semid < 0 {
		return nil, unix.EINVAL
	}
	s, err := e.ids.Lookup(semid)
	if err != nil {
		return nil, err
	}
	if err := s.Perm().CheckOwner(&c.Creds); err != nil {
		return nil, err
	}
	return s, nil
}
