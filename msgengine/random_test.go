package msgengine

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// The randomized differential test: sequences of calls drawn from a
// source of randomness, run on the kernel and on the engine. Process 0
// never blocks (IPC_NOWAIT on every send and receive); process 1 may sleep
// in one call at a time, which keeps every outcome independent of the
// scheduler (two sleepers woken together race in Linux).

// source gives the generator its choices.
type source interface{ IntN(n int) int }

// byteSource reads choices from fuzz input, then zeros.
type byteSource struct {
	b []byte
}

func (s *byteSource) IntN(n int) int {
	if len(s.b) < 2 {
		return 0
	}
	v := int(binary.LittleEndian.Uint16(s.b))
	s.b = s.b[2:]
	return v % n
}

// randomScenario returns a scenario of n calls drawn from src. The draws
// happen once, up front, so both sides run the same calls.
func randomScenario(src source, n int) func(*env) {
	type step struct {
		proc  int
		c     call
		async bool
		cred  int // 1: become an unprivileged user, 2: back to root
	}
	pick := func(xs ...int64) int64 { return xs[src.IntN(len(xs))] }
	texts := []string{"", "a", "bc", "defg", "hello world", "0123456789abcdef"}
	var steps []step
	for i := 0; i < n; i++ {
		var st step
		// ids: indexes into the ids seen so far, resolved at run time,
		// or a raw (invalid) id.
		idRef := src.IntN(6) - 1 // -1: raw invalid
		switch k := src.IntN(20); {
		case k < 2:
			keys := []int32{ipcns.IPCPrivate, 11, 12}
			flgs := []int{ipcns.IPCCreat | 0o666, ipcns.IPCCreat | 0o600, ipcns.IPCCreat | ipcns.IPCExcl | 0o644, 0, 0o666}
			st.c = call{op: opGet, key: keys[src.IntN(len(keys))], flg: flgs[src.IntN(len(flgs))]}
		case k < 8:
			t := texts[src.IntN(len(texts))]
			st.c = call{op: opSnd, id: idRef, typ: pick(1, 1, 2, 3, 5, 0), text: []byte(t), size: int64(len(t))}
			if src.IntN(30) == 0 {
				st.c.size = pick(8193, -1)
			}
		case k < 14:
			flg := []int{0, MsgNoError, MsgExcept, MsgCopy, MsgNoError | MsgExcept}[src.IntN(5)]
			st.c = call{op: opRcv, id: idRef, size: pick(0, 2, 4, 100, -1), typ: pick(0, 1, 2, 3, -2, -5, 5), flg: flg}
		case k < 16:
			st.c = call{op: opCtl, id: idRef, cmd: []int{ipcns.IPCStat, MsgStat, MsgStatAny, ipcns.IPCInfo, MsgInfo}[src.IntN(5)]}
			if st.c.cmd == MsgStat || st.c.cmd == MsgStatAny {
				st.c.id = -2 - src.IntN(4) // an index, resolved below
			}
		case k < 18:
			st.c = call{op: opCtl, id: idRef, cmd: ipcns.IPCSet, uid: uint32(pick(0, 0, 1000)), gid: uint32(pick(0, 1000)),
				mode: uint32(pick(0o666, 0o600, 0o640, 0o604, 0o622)), qbytes: uint64(pick(16384, 10, 20, 5, 0, 16385))}
		case k < 19:
			st.c = call{op: opCtl, id: idRef, cmd: ipcns.IPCRmid}
		default:
			st.cred = 1 + src.IntN(2)
			st.proc = src.IntN(2)
		}
		if st.cred == 0 && src.IntN(4) == 0 && (st.c.op == opSnd || st.c.op == opRcv) && st.c.flg&MsgCopy == 0 {
			st.proc, st.async = 1, true
		} else if st.cred == 0 && (st.c.op == opSnd || st.c.op == opRcv) {
			st.c.flg |= IPCNoWait
		}
		steps = append(steps, st)
	}
	return func(s *env) {
		var ids []int
		busy := false
		for _, st := range steps {
			if st.cred != 0 {
				if st.proc == 1 && busy {
					continue
				}
				if st.cred == 1 {
					s.creds(st.proc, 1000, 1000)
				} else {
					s.creds(st.proc, 0, 0)
				}
				s.logf("p%d creds %d", st.proc, st.cred)
				continue
			}
			c := st.c
			if c.op != opGet {
				switch {
				case c.id <= -2:
					c.id = -2 - c.id // an index
				case c.id < 0 || len(ids) == 0:
					c.id = 12345
				default:
					c.id = ids[c.id%len(ids)]
				}
			}
			if st.async {
				if busy {
					c.flg |= IPCNoWait
					s.do(0, c)
				} else {
					s.start(1, c)
					busy = true
				}
			} else {
				r := s.do(0, c)
				if c.op == opGet && r >= 0 {
					ids = append(ids, int(r))
				}
			}
			if busy {
				res, done := s.b.settle(1)
				if done {
					s.logf("p1 settle: %s", res)
					busy = false
				} else {
					s.logf("p1 settle: asleep")
				}
			}
		}
		if busy {
			s.interrupt(1)
			s.settle(1)
		}
		s.creds(0, 0, 0)
		s.creds(1, 0, 0)
		for _, id := range ids {
			s.stat(0, id, ipcns.IPCStat)
		}
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
	}
}

func TestRandomDifferential(t *testing.T) {
	needKernel(t)
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		sc := randomScenario(rand.New(rand.NewPCG(seed, 0x6d7367)), 120)
		g := runEngine(t, ipcns.DefaultLimits(), sc)
		k := runKernel(t, sc, g)
		t.Run("", func(t *testing.T) {
			t.Logf("seed %d", seed)
			compareLogs(t, k, g)
		})
	}
}

// FuzzDifferential runs fuzzer-chosen call sequences on both sides:
// go test -run '^$' -fuzz FuzzDifferential ./msgengine/
func FuzzDifferential(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0, 7, 0, 9, 0, 11, 0, 1, 0, 12, 0, 15, 0})
	f.Add([]byte("random bytes make random scenarios of msg queues"))
	f.Fuzz(func(t *testing.T, data []byte) {
		needKernel(t)
		sc := randomScenario(&byteSource{b: data}, min(len(data)/4+1, 60))
		g := runEngine(t, ipcns.DefaultLimits(), sc)
		compareLogs(t, runKernel(t, sc, g), g)
	})
}
