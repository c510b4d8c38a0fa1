package semengine

import "github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"

// Flags of a semaphore operation (include/uapi/linux/sem.h).
const (
	SemUndo   = 0x1000
	IPCNoWait = ipcns.IPCNoWait
)

// semctl commands (include/uapi/linux/sem.h).
const (
	GetPID     = 11
	GetVal     = 12
	GetAll     = 13
	GetNCnt    = 14
	GetZCnt    = 15
	SetVal     = 16
	SetAll     = 17
	SemStat    = 18
	SemInfo    = 19
	SemStatAny = 20
)

// Sembuf is one semaphore operation, struct sembuf.
type Sembuf struct {
	Num uint16 // semaphore index
	Op  int16  // added to the value; 0 waits for zero
	Flg int16  // IPC_NOWAIT, SEM_UNDO
}

// SemidDS is what IPC_STAT and SEM_STAT report, struct semid64_ds.
type SemidDS struct {
	Perm  ipcns.Perm
	Otime int64 // last semop, seconds; 0 if none
	Ctime int64 // creation or last change, seconds
	Nsems int
}

// Seminfo is what IPC_INFO and SEM_INFO report, struct seminfo.
type Seminfo struct {
	Semmap, Semmni, Semmns, Semmnu, Semmsl, Semopm, Semume, Semusz, Semvmx, Semaem int32
}
