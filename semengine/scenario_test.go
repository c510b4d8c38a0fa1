package semengine

import (
	"fmt"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// Scripted differential scenarios: each runs on the kernel and on the
// engine, and every result is compared.

type logf = func(string, res)

func op(num uint16, o int16, flg int16) Sembuf { return Sembuf{Num: num, Op: o, Flg: flg} }

const nowait = IPCNoWait

func stat(w world, log logf, a, id int) {
	log(fmt.Sprintf("stat %d", id), w.semctl(a, id, ipcns.IPCStat, ipcns.IPCStat, ctlArg{}))
}

func vals(w world, log logf, a, id, n int) {
	log(fmt.Sprintf("getall %d", id), w.semctl(a, id, 0, GetAll, ctlArg{Vals: make([]uint16, n)}))
}

func counts(w world, log logf, id, n int) {
	for i := 0; i < n; i++ {
		log(fmt.Sprintf("ncnt %d", i), w.semctl(0, id, i, GetNCnt, ctlArg{}))
		log(fmt.Sprintf("zcnt %d", i), w.semctl(0, id, i, GetZCnt, ctlArg{}))
		log(fmt.Sprintf("pid %d", i), w.semctl(0, id, i, GetPID, ctlArg{}))
	}
}

func TestDiffSemget(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		log("private", w.semget(0, ipcns.IPCPrivate, 3, 0o600))
		log("private nsems 0", w.semget(0, ipcns.IPCPrivate, 0, 0o600))
		log("nsems -1", w.semget(0, 7, -1, ipcns.IPCCreat|0o600))
		log("nsems > semmsl", w.semget(0, 7, 32001, ipcns.IPCCreat|0o600))
		log("enoent", w.semget(0, 7, 1, 0o600))
		log("create", w.semget(0, 7, 2, ipcns.IPCCreat|0o640))
		log("again", w.semget(0, 7, 2, ipcns.IPCCreat|0o600))
		log("excl", w.semget(0, 7, 2, ipcns.IPCCreat|ipcns.IPCExcl|0o600))
		log("bigger", w.semget(0, 7, 3, 0))
		log("nsems 0 existing", w.semget(0, 7, 0, 0))
		log("create key 0 nsems", w.semget(0, 8, 0, ipcns.IPCCreat|0o600))
		u := w.spawn(t)
		w.setCreds(t, u, 1000, 1000)
		log("user read 640", w.semget(u, 7, 0, 0o400))
		log("user write 640", w.semget(u, 7, 0, 0o200))
		log("user none", w.semget(u, 7, 0, 0))
		log("user creates", w.semget(u, 9, 1, ipcns.IPCCreat|0o604))
		log("root on user's", w.semget(0, 9, 1, 0o666))
		id := w.semget(u, 9, 1, 0).Ret
		stat(w, log, 0, id)
		g := w.spawn(t)
		w.setCreds(t, g, 2000, 3000, 1000)
		log("group member on 604", w.semget(g, 9, 0, 0o040))
		log("group member other bits", w.semget(g, 9, 0, 0o004))
	})
}

func TestDiffIDCycle(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		// Create and remove repeatedly: the index cycles over 64 slots
		// and the sequence number goes up at each wrap.
		for i := 0; i < 140; i++ {
			r := w.semget(0, ipcns.IPCPrivate, 1, 0o600)
			log("get", r)
			if i%3 != 0 {
				log("rm", w.semctl(0, r.Ret, 0, ipcns.IPCRmid, ctlArg{}))
			}
		}
		log("info", w.semctl(0, 0, 0, SemInfo, ctlArg{}))
		log("ipc info", w.semctl(0, 0, 0, ipcns.IPCInfo, ctlArg{}))
		log("stat idx 0", w.semctl(0, 0, 0, SemStat, ctlArg{}))
		log("stat idx 32768", w.semctl(0, 32768, 0, SemStat, ctlArg{}))
		log("stat idx 1", w.semctl(0, 1, 0, SemStat, ctlArg{}))
		log("stat stale id", w.semctl(0, 1, 0, ipcns.IPCStat, ctlArg{}))
	})
}

func TestDiffSemopErrors(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, ipcns.IPCPrivate, 2, 0o600).Ret
		log("nsops 0", w.semop(0, id, nil, nil))
		log("semid -1", w.semop(0, -1, []Sembuf{op(0, 1, 0)}, nil))
		big := make([]Sembuf, 501)
		log("e2big bad id", w.semop(0, 12345, big, nil))
		log("e2big semid -1", w.semop(0, -1, big, nil))
		log("nsops 0 semid -1", w.semop(0, -1, nil, nil))
		log("bad timeout semid -1", w.semop(0, -1, []Sembuf{op(0, 1, 0)}, &unix.Timespec{Nsec: -1}))
		log("e2big", w.semop(0, id, big, nil))
		log("500 ok", w.semop(0, id, make([]Sembuf, 500), nil))
		log("bad id", w.semop(0, id+1, []Sembuf{op(0, 1, 0)}, nil))
		log("efbig", w.semop(0, id, []Sembuf{op(2, 1, 0)}, nil))
		log("efbig bad id", w.semop(0, id+1, []Sembuf{op(2, 1, 0)}, nil))
		log("bad timeout", w.semop(0, id, []Sembuf{op(0, 1, 0)}, &unix.Timespec{Nsec: 1e9}))
		log("neg timeout", w.semop(0, id, []Sembuf{op(0, 1, 0)}, &unix.Timespec{Sec: -1}))
		log("bad timeout bad id", w.semop(0, id+1, []Sembuf{op(0, 1, 0)}, &unix.Timespec{Nsec: -1}))
		log("eagain", w.semop(0, id, []Sembuf{op(0, -1, nowait)}, nil))
		log("timeout 0", w.semop(0, id, []Sembuf{op(0, -1, 0)}, &unix.Timespec{}))
		log("zero ok", w.semop(0, id, []Sembuf{op(0, 0, 0)}, nil))
		stat(w, log, 0, id)
		log("max", w.semop(0, id, []Sembuf{op(0, 32767, 0)}, nil))
		log("erange", w.semop(0, id, []Sembuf{op(0, 1, nowait)}, nil))
		log("erange after block?", w.semop(0, id, []Sembuf{op(1, -1, nowait), op(0, 1, 0)}, nil))
		log("block before erange", w.semop(0, id, []Sembuf{op(0, 1, 0), op(1, -1, nowait)}, nil))
		vals(w, log, 0, id, 2)
		log("down", w.semop(0, id, []Sembuf{op(0, -32767, 0)}, nil))
		log("undo 32767", w.semop(0, id, []Sembuf{op(0, 32767, SemUndo)}, nil))
		log("undo -32767", w.semop(0, id, []Sembuf{op(0, -32767, SemUndo)}, nil))
		log("undo range", w.semop(0, id, []Sembuf{op(1, 32767, SemUndo), op(1, -32767, SemUndo), op(1, -1, SemUndo|nowait)}, nil))
		log("undo range 2", w.semop(0, id, []Sembuf{op(1, 32767, SemUndo), op(1, 1, 0), op(1, -32768, SemUndo), op(1, 1, SemUndo)}, nil))
		vals(w, log, 0, id, 2)
		log("dup ops", w.semop(0, id, []Sembuf{op(0, 5, 0), op(0, -3, 0), op(0, -2, 0), op(0, 0, nowait)}, nil))
		log("dup ops fail", w.semop(0, id, []Sembuf{op(0, 5, 0), op(0, -6, nowait)}, nil))
		vals(w, log, 0, id, 2)
		counts(w, log, id, 2)
		u := w.spawn(t)
		w.setCreds(t, u, 1000, 1000)
		log("eacces alter", w.semop(u, id, []Sembuf{op(0, 1, 0)}, nil))
		log("eacces zero", w.semop(u, id, []Sembuf{op(0, 0, 0)}, nil))
		log("efbig before eacces", w.semop(u, id, []Sembuf{op(5, 1, 0)}, nil))
		log("chmod", w.semctl(0, id, 0, ipcns.IPCSet, ctlArg{Mode: 0o604}))
		log("read ok", w.semop(u, id, []Sembuf{op(0, 0, nowait)}, nil))
		log("write denied", w.semop(u, id, []Sembuf{op(0, 1, 0), op(0, 0, 0)}, nil))
	})
}

func TestDiffSemctl(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, 0x1234, 3, ipcns.IPCCreat|0o640).Ret
		stat(w, log, 0, id)
		log("stat_any", w.semctl(0, id&0x7fff, 0, SemStatAny, ctlArg{}))
		log("ipc_64 stat", w.semctl(0, id, 0, ipcns.IPCStat|ipcns.IPC64, ctlArg{}))
		log("semid -1 info", w.semctl(0, -1, 0, SemInfo, ctlArg{}))
		log("info", w.semctl(0, 0, 0, SemInfo, ctlArg{}))
		log("ipcinfo", w.semctl(0, 99999, 0, ipcns.IPCInfo, ctlArg{}))
		log("bad cmd", w.semctl(0, id, 0, 99, ctlArg{}))
		log("bad cmd bad id", w.semctl(0, -5, 0, 99, ctlArg{}))
		log("setval", w.semctl(0, id, 1, SetVal, ctlArg{Val: 7}))
		log("getval", w.semctl(0, id, 1, GetVal, ctlArg{}))
		log("setval erange bad id", w.semctl(0, id+1, 1, SetVal, ctlArg{Val: -1}))
		log("setval 32768", w.semctl(0, id, 1, SetVal, ctlArg{Val: 32768}))
		log("setval semnum", w.semctl(0, id, 3, SetVal, ctlArg{Val: 1}))
		log("setval semnum -1", w.semctl(0, id, -1, SetVal, ctlArg{Val: 1}))
		log("getval semnum", w.semctl(0, id, 3, GetVal, ctlArg{}))
		log("getval bad id", w.semctl(0, id+1, 0, GetVal, ctlArg{}))
		log("setall", w.semctl(0, id, 0, SetAll, ctlArg{Vals: []uint16{1, 2, 3}}))
		vals(w, log, 0, id, 3)
		log("setall erange", w.semctl(0, id, 0, SetAll, ctlArg{Vals: []uint16{1, 32768, 3}}))
		vals(w, log, 0, id, 3)
		counts(w, log, id, 3)
		stat(w, log, 0, id)
		u := w.spawn(t)
		w.setCreds(t, u, 1000, 1000)
		log("user stat", w.semctl(u, id, 0, ipcns.IPCStat, ctlArg{}))
		log("user sem_stat", w.semctl(u, id&0x7fff, 0, SemStat, ctlArg{}))
		log("user stat_any", w.semctl(u, id&0x7fff, 0, SemStatAny, ctlArg{}))
		log("user getval", w.semctl(u, id, 0, GetVal, ctlArg{}))
		log("user getval bad semnum", w.semctl(u, id, 9, GetVal, ctlArg{}))
		log("user setval bad semnum", w.semctl(u, id, 9, SetVal, ctlArg{Val: 1}))
		log("user setval", w.semctl(u, id, 0, SetVal, ctlArg{Val: 1}))
		log("user set", w.semctl(u, id, 0, ipcns.IPCSet, ctlArg{UID: 1000, GID: 1000, Mode: 0o777}))
		log("user rmid", w.semctl(u, id, 0, ipcns.IPCRmid, ctlArg{}))
		log("set bad uid", w.semctl(0, id, 0, ipcns.IPCSet, ctlArg{UID: ^uint32(0), GID: 0, Mode: 0o600}))
		log("give away", w.semctl(0, id, 0, ipcns.IPCSet, ctlArg{UID: 1000, GID: 1000, Mode: 0o1600}))
		stat(w, log, 0, id)
		log("user stat now", w.semctl(u, id, 0, ipcns.IPCStat, ctlArg{}))
		log("user setall", w.semctl(u, id, 0, SetAll, ctlArg{Vals: []uint16{4, 5, 6}}))
		log("user getpid", w.semctl(u, id, 0, GetPID, ctlArg{}))
		log("user chmod", w.semctl(u, id, 0, ipcns.IPCSet, ctlArg{UID: 1000, GID: 1000, Mode: 0o400}))
		log("user write denied", w.semctl(u, id, 0, SetVal, ctlArg{Val: 1}))
		log("root bypasses", w.semctl(0, id, 0, SetVal, ctlArg{Val: 1}))
		log("user rmid own", w.semctl(u, id, 0, ipcns.IPCRmid, ctlArg{}))
		log("gone", w.semctl(0, id, 0, GetVal, ctlArg{}))
		log("key free", w.semget(0, 0x1234, 1, 0))
	})
}

func TestDiffBlocking(t *testing.T) { runBoth(t, blockingScenario) }

func blockingScenario(t *testing.T, w world, log logf) {
	id := w.semget(0, ipcns.IPCPrivate, 3, 0o600).Ret
	log("sem 1 = 1", w.semctl(0, id, 1, SetVal, ctlArg{Val: 1}))
	a, b, c := w.spawn(t), w.spawn(t), w.spawn(t)
	log("a -2", w.semop(a, id, []Sembuf{op(0, -2, 0)}, nil))
	log("b -1", w.semop(b, id, []Sembuf{op(0, -1, 0)}, nil))
	log("c zero on 1", w.semop(c, id, []Sembuf{op(1, 0, 0)}, nil))
	counts(w, log, id, 3)
	log("+1", w.semop(0, id, []Sembuf{op(0, 1, 0), op(1, 1, 0)}, nil))
	log("b", w.wait(t, b))
	counts(w, log, id, 3)
	log("+2", w.semop(0, id, []Sembuf{op(0, 2, 0)}, nil))
	log("a", w.wait(t, a))
	log("1 to 0", w.semop(0, id, []Sembuf{op(1, -2, 0)}, nil))
	log("c", w.wait(t, c))
	counts(w, log, id, 3)
	vals(w, log, 0, id, 3)
	stat(w, log, 0, id)
}

func TestDiffComplexQueue(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, ipcns.IPCPrivate, 3, 0o600).Ret
		log("sem 2 = 1", w.semctl(0, id, 2, SetVal, ctlArg{Val: 1}))
		a, b, c, d := w.spawn(t), w.spawn(t), w.spawn(t), w.spawn(t)
		log("a simple -1 on 1", w.semop(a, id, []Sembuf{op(1, -1, 0)}, nil))
		log("b complex", w.semop(b, id, []Sembuf{op(0, -1, 0), op(1, -1, 0), op(2, 1, 0)}, nil))
		log("c simple -1 on 0", w.semop(c, id, []Sembuf{op(0, -1, 0)}, nil))
		log("d complex zero", w.semop(d, id, []Sembuf{op(2, 0, 0), op(1, 0, 0)}, nil))
		counts(w, log, id, 3)
		log("up 2", w.semop(0, id, []Sembuf{op(2, 1, 0)}, nil))
		counts(w, log, id, 3)
		log("up 0,1", w.semop(0, id, []Sembuf{op(0, 1, 0), op(1, 1, 0)}, nil))
		for _, x := range []int{a, b, c, d} {
			log(fmt.Sprint("actor ", x), w.wait(t, x))
		}
		counts(w, log, id, 3)
		log("up 0,1 again", w.semop(0, id, []Sembuf{op(0, 1, 0), op(1, 1, 0)}, nil))
		for _, x := range []int{a, b, c, d} {
			log(fmt.Sprint("actor ", x), w.wait(t, x))
		}
		counts(w, log, id, 3)
		vals(w, log, 0, id, 3)
		log("setall", w.semctl(0, id, 0, SetAll, ctlArg{Vals: []uint16{1, 0, 0}}))
		for _, x := range []int{a, b, c, d} {
			log(fmt.Sprint("actor ", x), w.wait(t, x))
		}
		counts(w, log, id, 3)
		vals(w, log, 0, id, 3)
		stat(w, log, 0, id)
	})
}

func TestDiffWakeOrder(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, ipcns.IPCPrivate, 2, 0o600).Ret
		var as []int
		for i := 0; i < 5; i++ {
			as = append(as, w.spawn(t))
		}
		log("0: -3", w.semop(as[0], id, []Sembuf{op(0, -3, 0)}, nil))
		log("1: -1", w.semop(as[1], id, []Sembuf{op(0, -1, 0)}, nil))
		log("2: -1,-1 on 1", w.semop(as[2], id, []Sembuf{op(0, -1, 0), op(1, -1, 0)}, nil))
		log("3: -2", w.semop(as[3], id, []Sembuf{op(0, -2, 0)}, nil))
		log("4: zero 0 + -1 on 1", w.semop(as[4], id, []Sembuf{op(1, -1, 0), op(0, 0, 0)}, nil))
		counts(w, log, id, 2)
		log("+2 on 0", w.semop(0, id, []Sembuf{op(0, 2, 0)}, nil))
		log("1", w.wait(t, as[1]))
		counts(w, log, id, 2)
		log("+1 on 1", w.semop(0, id, []Sembuf{op(1, 1, 0)}, nil))
		log("2", w.wait(t, as[2]))
		counts(w, log, id, 2)
		log("+1 on 1 again", w.semop(0, id, []Sembuf{op(1, 1, 0)}, nil))
		log("4", w.wait(t, as[4]))
		log("setval 0 5", w.semctl(0, id, 0, SetVal, ctlArg{Val: 5}))
		log("0", w.wait(t, as[0]))
		log("3", w.wait(t, as[3]))
		vals(w, log, 0, id, 2)
		counts(w, log, id, 2)
	})
}

func TestDiffRmidTimeoutInterrupt(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, ipcns.IPCPrivate, 2, 0o600).Ret
		a, b, c := w.spawn(t), w.spawn(t), w.spawn(t)
		log("timed", w.semop(a, id, []Sembuf{op(0, -1, 0)}, &unix.Timespec{Nsec: 30e6}))
		log("timed out", w.waitDone(t, a))
		log("a again", w.semop(a, id, []Sembuf{op(0, -1, 0)}, nil))
		log("b zero", w.semop(b, id, []Sembuf{op(0, 1, 0), op(1, -1, 0)}, nil))
		log("c", w.semop(c, id, []Sembuf{op(1, -1, 0)}, nil))
		counts(w, log, id, 2)
		w.interrupt(t, c)
		log("c interrupted", w.waitDone(t, c))
		counts(w, log, id, 2)
		log("rmid", w.semctl(0, id, 0, ipcns.IPCRmid, ctlArg{}))
		log("a", w.wait(t, a))
		log("b", w.wait(t, b))
		log("after", w.semop(a, id, []Sembuf{op(0, 1, 0)}, nil))
	})
}

func TestDiffUndo(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, ipcns.IPCPrivate, 3, 0o600).Ret
		log("setall", w.semctl(0, id, 0, SetAll, ctlArg{Vals: []uint16{5, 5, 5}}))
		a := w.spawn(t)
		log("a takes", w.semop(a, id, []Sembuf{op(0, -2, SemUndo), op(1, 3, SemUndo), op(2, -1, 0)}, nil))
		vals(w, log, 0, id, 3)
		stat(w, log, 0, id)
		w.exit(t, a)
		vals(w, log, 0, id, 3)
		counts(w, log, id, 3)
		stat(w, log, 0, id)

		// Clamping at 0 and SEMVMX, SETVAL clearing one adjustment.
		b := w.spawn(t)
		log("b", w.semop(b, id, []Sembuf{op(0, -3, SemUndo), op(1, 32760, SemUndo), op(2, 1, SemUndo)}, nil))
		log("setval 0 to 0", w.semctl(0, id, 0, SetVal, ctlArg{Val: 0}))
		log("setval 2", w.semctl(0, id, 2, SetVal, ctlArg{Val: 9}))
		log("raise 1", w.semctl(0, id, 1, SetVal, ctlArg{Val: 3}))
		vals(w, log, 0, id, 3)
		w.kill(t, b)
		vals(w, log, 0, id, 3)
		counts(w, log, id, 3)

		// An adjustment that would go below zero is clamped.
		c := w.spawn(t)
		log("c", w.semop(c, id, []Sembuf{op(2, 4, SemUndo)}, nil))
		log("drain 2", w.semctl(0, id, 2, SetAll, ctlArg{Vals: []uint16{1, 1, 1}}))
		log("c again", w.semop(c, id, []Sembuf{op(2, 3, SemUndo)}, nil))
		log("drain", w.semop(0, id, []Sembuf{op(2, -4, 0)}, nil))
		w.exit(t, c)
		vals(w, log, 0, id, 3)
		counts(w, log, id, 3)
	})
}

func TestDiffUndoWakes(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, ipcns.IPCPrivate, 1, 0o600).Ret
		log("one", w.semctl(0, id, 0, SetVal, ctlArg{Val: 1}))
		holder, waiter := w.spawn(t), w.spawn(t)
		log("lock", w.semop(holder, id, []Sembuf{op(0, -1, SemUndo)}, nil))
		log("wait", w.semop(waiter, id, []Sembuf{op(0, -1, SemUndo)}, nil))
		w.kill(t, holder)
		log("woken by exit", w.wait(t, waiter))
		counts(w, log, id, 1)
		vals(w, log, 0, id, 1)
		w.exit(t, waiter)
		vals(w, log, 0, id, 1)
		counts(w, log, id, 1)
	})
}

// TestDiffUndoStaleID is the seed 002 bug: an undo entry for a removed set
// must never be applied to a new set that got the same id.
func TestDiffUndoStaleID(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		a := w.spawn(t)
		id := w.semget(0, 42, 1, ipcns.IPCCreat|0o600).Ret
		log("a +5 undo", w.semop(a, id, []Sembuf{op(0, 5, SemUndo)}, nil))
		log("rmid", w.semctl(0, id, 0, ipcns.IPCRmid, ctlArg{}))
		log("other", w.semget(0, ipcns.IPCPrivate, 1, 0o600))
		w.setNextID(t, id)
		log("same id", w.semget(0, ipcns.IPCPrivate, 1, 0o600))
		log("setval 10", w.semctl(0, id, 0, SetVal, ctlArg{Val: 10}))
		w.exit(t, a)
		vals(w, log, 0, id, 1)
		counts(w, log, id, 1)
		stat(w, log, 0, id)
	})
}

// TestDiffUndoFailedOp: a SEM_UNDO semop that fails after the undo entry
// is made still leaves the entry, and exit stamps otime.
func TestDiffUndoFailedOp(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, ipcns.IPCPrivate, 2, 0o600).Ret
		a := w.spawn(t)
		log("efbig with undo", w.semop(a, id, []Sembuf{op(5, 1, SemUndo)}, nil))
		stat(w, log, 0, id)
		w.exit(t, a)
		stat(w, log, 0, id)
	})
}

// TestDiffPidNamespaces: GETPID answers in the pid namespace of the caller:
// the number there, 0 when the process is not visible, and the old number
// after it has exited.
func TestDiffPidNamespaces(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		id := w.semget(0, 77, 3, ipcns.IPCCreat|0o666).Ret
		inner, other := w.spawnInPidNS(t), w.spawnInPidNS(t)
		plain := w.spawn(t)
		log("inner ops 0", w.semop(inner, id, []Sembuf{op(0, 1, 0)}, nil))
		log("main ops 1", w.semop(0, id, []Sembuf{op(1, 1, 0)}, nil))
		log("plain ops 2", w.semop(plain, id, []Sembuf{op(2, 1, 0)}, nil))
		for _, a := range []int{0, inner, other, plain} {
			for s := 0; s < 3; s++ {
				log(fmt.Sprintf("actor %d getpid %d", a, s), w.semctl(a, id, s, GetPID, ctlArg{}))
			}
		}
		log("other waits", w.semop(other, id, []Sembuf{op(1, -2, SemUndo)}, nil))
		log("inner posts", w.semop(inner, id, []Sembuf{op(1, 1, 0)}, nil))
		log("other", w.wait(t, other))
		for _, a := range []int{0, inner, other, plain} {
			log(fmt.Sprintf("actor %d getpid 1", a), w.semctl(a, id, 1, GetPID, ctlArg{}))
		}
		w.exit(t, other)
		for _, a := range []int{0, inner, plain} {
			log(fmt.Sprintf("after exit: actor %d getpid 1", a), w.semctl(a, id, 1, GetPID, ctlArg{}))
		}
	})
}

// TestDiffLimits: kernel.sem limits, per namespace, and where each error
// comes from when they bite.
func TestDiffLimits(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		w.setSemLimits(t, "4 6 3 3")
		log("info", w.semctl(0, 0, 0, ipcns.IPCInfo, ctlArg{}))
		log("nsems 5", w.semget(0, ipcns.IPCPrivate, 5, 0o600))
		log("nsems 4", w.semget(0, ipcns.IPCPrivate, 4, 0o600))
		log("semmns", w.semget(0, ipcns.IPCPrivate, 3, 0o600))
		log("semmns nsems 0", w.semget(0, ipcns.IPCPrivate, 0, 0o600))
		log("fits", w.semget(0, 5, 2, ipcns.IPCCreat|0o600))
		log("sem_info", w.semctl(0, 0, 0, SemInfo, ctlArg{}))
		log("semmns again", w.semget(0, ipcns.IPCPrivate, 1, 0o600))
		log("existing key past semmns", w.semget(0, 5, 1, ipcns.IPCCreat|0o600))
		w.setSemLimits(t, "4 100 3 3")
		log("third set", w.semget(0, ipcns.IPCPrivate, 1, 0o600))
		log("semmni", w.semget(0, ipcns.IPCPrivate, 1, 0o600))
		log("semmni nsems 0", w.semget(0, ipcns.IPCPrivate, 0, 0o600))
		log("semmni nsems 5", w.semget(0, ipcns.IPCPrivate, 5, 0o600))
		log("semopm", w.semop(0, 0, make([]Sembuf, 4), nil))
		log("semopm ok", w.semop(0, 0, make([]Sembuf, 3), nil))
		w.setSemLimits(t, "4 100 3 2")
		log("semmni lowered below use", w.semget(0, ipcns.IPCPrivate, 1, 0o600))
		log("info after", w.semctl(0, 0, 0, SemInfo, ctlArg{}))
	})
}

// TestDiffProcSysvipc: /proc/sysvipc/sem, byte for byte but for the times.
func TestDiffProcSysvipc(t *testing.T) {
	runBoth(t, func(t *testing.T, w world, log logf) {
		log("empty:\n"+w.proc(t), res{})
		a := w.semget(0, 0x1234, 3, ipcns.IPCCreat|0o640).Ret
		w.semget(0, ipcns.IPCPrivate, 1, 0o600)
		c := w.semget(0, -5, 250, ipcns.IPCCreat|0o777).Ret
		w.semop(0, a, []Sembuf{op(1, 1, 0)}, nil)
		w.semctl(0, c, 0, ipcns.IPCSet, ctlArg{UID: 1234, GID: 5678, Mode: 0o604})
		w.semctl(0, 1, 0, ipcns.IPCRmid, ctlArg{})
		log("three:\n"+w.proc(t), res{})
	})
}
