package semengine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// The randomized differential test: op sequences drawn from a seeded
// generator run on the kernel and on the engine, and every result must
// match. Spawned actors may sleep; the scenario's own process never does.

// source is what the generator draws from: a seeded PRNG, or fuzz bytes.
type source interface {
	IntN(n int) int
}

// bytesSource draws from fuzz input, then zeros.
type bytesSource struct {
	b []byte
}

func (s *bytesSource) IntN(n int) int {
	if len(s.b) == 0 || n <= 1 {
		return 0
	}
	v := int(s.b[0])
	if len(s.b) > 1 {
		v = v<<8 | int(s.b[1])
		s.b = s.b[2:]
	} else {
		s.b = s.b[1:]
	}
	return v % n
}

type gen struct {
	src    source
	ids    []int
	nsems  map[int]int
	actors []int
	busy   map[int]bool
}

func (g *gen) pick(vals ...int) int { return vals[g.src.IntN(len(vals))] }

func (g *gen) id() int {
	if len(g.ids) == 0 || g.src.IntN(12) == 0 {
		return g.pick(-1, 0, 1, 32768, 65, 0x7fffffff)
	}
	return g.ids[g.src.IntN(len(g.ids))]
}

func (g *gen) semnum(id int) int {
	n := max(g.nsems[id], 1)
	if g.src.IntN(15) == 0 {
		return g.pick(-1, n, n+1, 65535)
	}
	return g.src.IntN(n)
}

func (g *gen) semval() int16 {
	switch g.src.IntN(10) {
	case 0:
		return int16(g.pick(32767, -32767, -32768, 32766, 16384))
	case 1:
		return 0
	}
	return int16(g.src.IntN(7) - 3)
}

func (g *gen) sops(id int, nowait bool) []Sembuf {
	n := 1 + g.src.IntN(3)
	if g.src.IntN(20) == 0 {
		n = g.pick(0, 4, 6)
	}
	sops := make([]Sembuf, n)
	for i := range sops {
		flg := int16(0)
		if nowait || g.src.IntN(3) == 0 {
			flg |= IPCNoWait
		}
		if g.src.IntN(3) == 0 {
			flg |= SemUndo
		}
		sops[i] = Sembuf{Num: uint16(g.semnum(id)), Op: g.semval(), Flg: flg}
	}
	return sops
}

func (g *gen) step(t *testing.T, w world, log logf, i int) {
	who := 0
	if len(g.actors) > 0 && g.src.IntN(3) == 0 {
		who = g.actors[g.src.IntN(len(g.actors))]
	}
	if g.busy[who] {
		r := w.wait(t, who)
		log(fmt.Sprintf("%d: wait %d", i, who), r)
		if !r.Blocked {
			g.busy[who] = false
		}
		return
	}
	switch k := g.src.IntN(20); {
	case k < 2:
		key := int32(g.pick(0, 0, 1, 2, 3))
		flg := g.pick(ipcns.IPCCreat|0o600, ipcns.IPCCreat|0o666, 0o600, ipcns.IPCCreat|ipcns.IPCExcl|0o600, ipcns.IPCCreat|0o400)
		nsems := g.pick(1, 2, 3, 5, 0, -1)
		r := w.semget(who, key, nsems, flg)
		log(fmt.Sprintf("%d: a%d semget(%d, %d, %#o)", i, who, key, nsems, flg), r)
		if r.Err == 0 {
			if _, ok := g.nsems[r.Ret]; !ok {
				g.ids = append(g.ids, r.Ret)
				g.nsems[r.Ret] = nsems
			}
		}
	case k < 10:
		id := g.id()
		sops := g.sops(id, who == 0)
		r := w.semop(who, id, sops, nil)
		log(fmt.Sprintf("%d: a%d semop(%d, %v)", i, who, id, sops), r)
		if r.Blocked {
			g.busy[who] = true
		}
	case k < 17:
		id := g.id()
		cmd := g.pick(GetVal, GetPID, GetNCnt, GetZCnt, GetAll, SetVal, SetVal, SetAll, ipcns.IPCStat, SemStat, SemStatAny, SemInfo, ipcns.IPCInfo, ipcns.IPCSet, 99)
		n := max(g.nsems[id], 1)
		arg := ctlArg{Val: int(g.semval()), Vals: make([]uint16, n), UID: uint32(g.pick(0, 1000)), GID: uint32(g.pick(0, 1000)), Mode: uint16(g.pick(0o600, 0o666, 0o400, 0o1777))}
		for j := range arg.Vals {
			arg.Vals[j] = uint16(g.src.IntN(5))
		}
		if cmd == SemStat || cmd == SemStatAny {
			id = g.pick(0, 1, 2, id, id&0x7fff)
		}
		num := g.semnum(id)
		r := w.semctl(who, id, num, cmd, arg)
		log(fmt.Sprintf("%d: a%d semctl(%d, %d, %d, %+v)", i, who, id, num, cmd, arg), r)
	case k < 18:
		id := g.id()
		log(fmt.Sprintf("%d: a%d rmid %d", i, who, id), w.semctl(who, id, 0, ipcns.IPCRmid, ctlArg{}))
	default:
		if who == 0 {
			if len(g.actors) < 3 {
				g.actors = append(g.actors, w.spawn(t))
			}
			return
		}
		// An actor exits or is killed, even while it sleeps: its undo
		// adjustments are applied.
		if g.src.IntN(2) == 0 {
			w.kill(t, who)
		} else {
			w.exit(t, who)
		}
		log(fmt.Sprintf("%d: a%d exits", i, who), res{})
		for j, a := range g.actors {
			if a == who {
				g.actors = append(g.actors[:j], g.actors[j+1:]...)
				break
			}
		}
	}
}

// randomScenario runs steps generator steps, then wakes what sleeps so that
// the final states can be compared.
func randomScenario(newSource func() source, steps int, actors bool) func(*testing.T, world, logf) {
	return func(t *testing.T, w world, log logf) {
		g := &gen{src: newSource(), nsems: map[int]int{}, busy: map[int]bool{}}
		if actors {
			g.actors = []int{w.spawn(t), w.spawn(t)}
		}
		for i := 0; i < steps; i++ {
			g.step(t, w, log, i)
		}
		for _, id := range g.ids {
			log(fmt.Sprintf("final stat %d", id), w.semctl(0, id, 0, ipcns.IPCStat, ctlArg{}))
			n := max(g.nsems[id], 1)
			log(fmt.Sprintf("final vals %d", id), w.semctl(0, id, 0, GetAll, ctlArg{Vals: make([]uint16, n)}))
			for s := 0; s < n; s++ {
				log(fmt.Sprintf("final ncnt %d/%d", id, s), w.semctl(0, id, s, GetNCnt, ctlArg{}))
				log(fmt.Sprintf("final zcnt %d/%d", id, s), w.semctl(0, id, s, GetZCnt, ctlArg{}))
				log(fmt.Sprintf("final pid %d/%d", id, s), w.semctl(0, id, s, GetPID, ctlArg{}))
			}
			// Removing the set wakes every sleeper with EIDRM.
			log(fmt.Sprintf("final rmid %d", id), w.semctl(0, id, 0, ipcns.IPCRmid, ctlArg{}))
		}
		for _, a := range g.actors {
			if g.busy[a] {
				log(fmt.Sprintf("final wait %d", a), w.wait(t, a))
			}
		}
	}
}

func TestDiffRandom(t *testing.T) {
	seeds, steps := 24, 250
	if testing.Short() {
		seeds = 6
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runBoth(t, randomScenario(func() source { return rand.New(rand.NewPCG(uint64(seed), 0x5eed)) }, steps, true))
		})
	}
}

// FuzzDiff runs fuzzer-chosen op sequences from the scenario's own process
// (no actors: a fuzz iteration must be quick).
//
//	go test -run '^$' -fuzz FuzzDiff -fuzztime 2m ./semengine/
func FuzzDiff(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 3, 5, 5, 1, 1, 7, 7, 3, 3, 9, 9})
	f.Add([]byte("semaphores are differential"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			data = data[:400]
		}
		runBoth(t, randomScenario(func() source { return &bytesSource{b: data} }, len(data)/3, false))
	})
}
