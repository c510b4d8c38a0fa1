package msgengine

import (
	"strings"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

const (
	nowait  = IPCNoWait
	noerror = MsgNoError
	except  = MsgExcept
	cp      = MsgCopy
)

// Scripted differential scenarios, one rule each (or a few related ones).
var scenarios = map[string]func(*env){
	"get": func(s *env) {
		s.get(0, 42, 0)                            // ENOENT
		a := s.get(0, 42, ipcns.IPCCreat|0o640)    // new
		s.get(0, 42, ipcns.IPCCreat|0o600)         // existing
		s.get(0, 42, ipcns.IPCCreat|ipcns.IPCExcl) // EEXIST
		s.get(0, 42, 0o777)                        // root: any mode
		s.get(0, ipcns.IPCPrivate, 0o600)
		s.get(0, ipcns.IPCPrivate, 0o600)
		s.stat(0, a, ipcns.IPCStat)
		s.creds(0, 1000, 1000)
		s.get(0, 42, 0o400) // EACCES for other
		s.get(0, 43, ipcns.IPCCreat|0o600)
		b := s.get(0, 44, ipcns.IPCCreat|0o604)
		s.creds(0, 0, 0)
		s.stat(0, b, ipcns.IPCStat)
		s.rmid(0, a)
		s.get(0, 42, ipcns.IPCCreat|0o600) // new id, seq moves on
		s.stat(0, 0, MsgStat)
		s.stat(0, 1, MsgStat)
		s.stat(0, 5, MsgStat)
		s.do(0, call{op: opCtl, id: 0, cmd: ipcns.IPCInfo})
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
	},
	"sendrecv-basic": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o600)
		s.stat(0, id, ipcns.IPCStat)
		s.snd(0, id, 1, "hello", 0)
		s.snd(0, id, 2, "", 0)
		s.snd(0, id, 1, "world!", 0)
		s.stat(0, id, ipcns.IPCStat)
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
		s.rcv(0, id, 100, 0, 0)
		s.rcv(0, id, 100, 0, 0)
		s.rcv(0, id, 100, 0, 0)
		s.rcv(0, id, 100, 0, nowait)
		s.stat(0, id, ipcns.IPCStat)
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
	},
	"argument-errors": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o600)
		s.do(0, call{op: opSnd, id: id, typ: 1, size: 8193})
		s.do(0, call{op: opSnd, id: id, typ: 1, size: 8192})
		s.do(0, call{op: opSnd, id: id, typ: 1, size: -1})
		s.do(0, call{op: opSnd, id: -1, typ: 1, size: 1})
		s.do(0, call{op: opSnd, id: id, typ: 0, size: 1})
		s.do(0, call{op: opSnd, id: id, typ: -5, size: 1})
		s.do(0, call{op: opSnd, id: 12345, typ: 0, size: 1}) // mtype before lookup
		s.do(0, call{op: opSnd, id: 12345, typ: 1, size: 1}) // no such id
		s.do(0, call{op: opSnd, id: id + 32768, typ: 1, size: 1})
		s.rcv(0, -1, 10, 0, 0)
		s.rcv(0, id, -1, 0, 0)
		s.rcv(0, 12345, 10, 0, nowait)
		s.rcv(0, 12345, -1, 0, nowait)
		s.stat(0, -1, ipcns.IPCStat)
		s.stat(0, 12345, ipcns.IPCStat)
		s.stat(0, id+32768, ipcns.IPCStat)
		s.stat(0, id+32768, MsgStat) // an index: seq ignored
		s.do(0, call{op: opCtl, id: -1, cmd: ipcns.IPCInfo})
		s.rmid(0, 12345)
		s.set(0, 12345, 0, 0, 0o600, 100)
		s.stat(0, id, ipcns.IPCStat)
	},
	"types": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o600)
		for i, t := range []int64{5, 3, 7, 3, 1, 9, 5, 2, 2, 8} {
			s.snd(0, id, t, strings.Repeat("x", i)+string(rune('a'+i)), 0)
		}
		s.rcv(0, id, 100, 3, 0)
		s.rcv(0, id, 100, 3, except)
		s.rcv(0, id, 100, 5, except)
		s.rcv(0, id, 100, -4, 0)
		s.rcv(0, id, 100, -4, 0)
		s.rcv(0, id, 100, -1, nowait)
		s.rcv(0, id, 100, -100, 0)
		s.rcv(0, id, 100, 4, nowait)
		s.rcv(0, id, 100, 4, nowait|except)
		s.rcv(0, id, 100, 0, 0)
		s.stat(0, id, ipcns.IPCStat)
		s.rcv(0, id, 100, -9223372036854775808, 0) // LONG_MIN
		for i := 0; i < 5; i++ {
			s.rcv(0, id, 100, 0, nowait)
		}
	},
	"e2big-noerror": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o600)
		s.snd(0, id, 1, "0123456789", 0)
		s.snd(0, id, 2, "ab", 0)
		s.rcv(0, id, 4, 0, 0)        // E2BIG, stays
		s.rcv(0, id, 4, 0, nowait)   // E2BIG before ENOMSG
		s.rcv(0, id, 4, 2, 0)        // type 2 fits
		s.stat(0, id, ipcns.IPCStat) // one left
		s.rcv(0, id, 4, 0, noerror)  // truncated
		s.stat(0, id, ipcns.IPCStat)
		s.snd(0, id, 1, "xyz", 0)
		s.rcv(0, id, 0, 0, noerror)
	},
	"msgcopy": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o600)
		s.snd(0, id, 4, "first", 0)
		s.snd(0, id, 2, "second-long", 0)
		s.snd(0, id, 4, "third", 0)
		s.rcv(0, id, 100, 0, cp)               // EINVAL: needs IPC_NOWAIT
		s.rcv(0, id, 100, 0, cp|nowait|except) // EINVAL
		s.rcv(0, 12345, 100, 0, cp)            // EINVAL flags before lookup
		s.rcv(0, id, 100, 0, cp|nowait)
		s.rcv(0, id, 100, 1, cp|nowait)
		s.rcv(0, id, 100, 2, cp|nowait)
		s.rcv(0, id, 100, 3, cp|nowait) // ENOMSG
		s.rcv(0, id, 100, -1, cp|nowait)
		s.rcv(0, id, 5, 1, cp|nowait)         // E2BIG
		s.rcv(0, id, 5, 1, cp|nowait|noerror) // EINVAL from copy_msg
		s.rcv(0, id, 5, 0, cp|nowait|noerror) // fits exactly
		s.stat(0, id, ipcns.IPCStat)          // nothing dequeued, rtime 0
		s.rcv(0, id, 100, 2, 0)
		s.rcv(0, id, 100, 1, cp|nowait)
		s.rcv(0, id, 1<<20, 0, cp|nowait) // bufsz above msgmax
	},
	"full-queue": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o600)
		s.set(0, id, 0, 0, 0o600, 10)
		s.snd(0, id, 1, "12345", nowait)
		s.snd(0, id, 1, "123456", nowait) // bytes
		s.snd(0, id, 1, "1234", nowait)
		s.snd(0, id, 1, "1", nowait)
		s.stat(0, id, ipcns.IPCStat)
		s.set(0, id, 0, 0, 0o600, 3) // now over the limit
		s.snd(0, id, 1, "", nowait)
		s.rcv(0, id, 100, 0, 0)
		s.rcv(0, id, 100, 0, 0)
		s.snd(0, id, 1, "", nowait) // count: qnum+1 <= qbytes
		s.snd(0, id, 1, "", nowait)
		s.snd(0, id, 1, "", nowait)
		s.snd(0, id, 1, "", nowait)
		s.stat(0, id, ipcns.IPCStat)
		s.set(0, id, 0, 0, 0o600, 0)
		s.snd(0, id, 1, "", nowait)
		s.stat(0, id, ipcns.IPCStat)
	},
	"ipcset": func(s *env) {
		id := s.get(0, 7, ipcns.IPCCreat|0o600)
		s.set(0, id, 1000, 1001, 0o7640, 16384)
		s.stat(0, id, ipcns.IPCStat)
		s.set(0, id, 0xffffffff, 0, 0o600, 100) // EINVAL uid
		s.set(0, id, 0, 0xffffffff, 0o600, 100) // EINVAL gid
		s.set(0, id, 0, 0, 0o600, 16385)        // EPERM: no CAP_SYS_RESOURCE here
		s.set(0, id, 0, 0, 0o600, 0x80000000)   // EPERM: compared unsigned
		s.set(0, id, 0, 0, 0o600, 0x100000005)  // low 32 bits
		s.stat(0, id, ipcns.IPCStat)
		s.set(0, id, 0, 0, 0o600, 0x100004001) // EPERM via the low bits
		s.set(0, id, 0xffffffff, 0, 0o600, 16385)
		s.set(0, id, 1000, 1000, 0o600, 16384)
		s.creds(0, 2000, 2000)
		s.set(0, id, 2000, 2000, 0o666, 100) // EPERM: not owner
		s.rmid(0, id)                        // EPERM
		s.stat(0, id, ipcns.IPCStat)         // EACCES
		s.stat(0, 0, MsgStat)                // EACCES
		s.stat(0, 0, MsgStatAny)
		s.creds(0, 1000, 1000)
		s.stat(0, id, ipcns.IPCStat)
		s.set(0, id, 3000, 3000, 0o644, 100) // owner may give away
		s.stat(0, id, ipcns.IPCStat)
		s.snd(0, id, 1, "x", nowait) // creator still? no: write needs mode
		s.rcv(0, id, 10, 0, nowait)
		s.set(0, id, 1000, 1000, 0o600, 100) // creator may still set
		s.creds(0, 0, 0)
		s.stat(0, id, ipcns.IPCStat)
		s.rmid(0, id)
		s.rmid(0, id)
		s.stat(0, id, ipcns.IPCStat)
		s.stat(0, 0, MsgStat)
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
	},
	"permissions": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o640)
		s.set(0, id, 1000, 1000, 0o640, 16384)
		s.creds(0, 1001, 1000) // group: read only
		s.snd(0, id, 1, "x", nowait)
		s.rcv(0, id, 10, 0, nowait)
		s.stat(0, id, ipcns.IPCStat)
		s.creds(0, 1002, 1002) // other: nothing
		s.snd(0, id, 1, "x", nowait)
		s.rcv(0, id, 10, 0, nowait)
		s.rcv(0, id, -1, 0, nowait) // EINVAL before EACCES
		s.snd(0, id, 0, "x", nowait)
		s.creds(0, 1000, 1000)
		s.snd(0, id, 1, "x", nowait)
		s.rcv(0, id, 10, 0, nowait)
		s.creds(0, 0, 0)
	},
	"pids-times": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.snd(1, id, 1, "a", 0)
		s.stat(0, id, ipcns.IPCStat)
		s.rcv(2, id, 10, 0, 0)
		s.stat(0, id, ipcns.IPCStat)
		s.snd(2, id, 1, "b", 0)
		s.rcv(1, id, 10, 0, 0)
		s.stat(0, id, ipcns.IPCStat)
		s.rcv(0, id, 10, 0, nowait) // ENOMSG: lrpid unchanged
		s.stat(0, id, ipcns.IPCStat)
	},
	"blocking-receivers": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.startRcv(1, id, 100, 2, 0)
		s.settle(1)
		s.startRcv(2, id, 100, 0, 0)
		s.settle(2)
		s.startRcv(3, id, 100, -3, 0)
		s.settle(3)
		s.snd(0, id, 5, "five", 0) // to p2 (any)
		s.settle(1)
		s.settle(2)
		s.settle(3)
		s.stat(0, id, ipcns.IPCStat) // qnum 0, lrpid p2
		s.snd(0, id, 2, "two", 0)    // p1 first in line
		s.settle(1)
		s.settle(3)
		s.snd(0, id, 3, "three", 0)
		s.settle(3)
		s.stat(0, id, ipcns.IPCStat)
	},
	"pipelined-e2big": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.startRcv(1, id, 2, 0, 0) // too small
		s.settle(1)
		s.startRcv(2, id, 3, 0, noerror) // truncates
		s.settle(2)
		s.startRcv(3, id, 100, 0, 0)
		s.settle(3)
		s.snd(0, id, 9, "abcdef", 0)
		s.settle(1)
		s.settle(2)
		s.settle(3)
		s.snd(0, id, 9, "ghijkl", 0)
		s.settle(3)
		s.stat(0, id, ipcns.IPCStat)
	},
	"pipelined-except": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.startRcv(1, id, 100, 4, except)
		s.settle(1)
		s.startRcv(2, id, 100, 4, 0)
		s.settle(2)
		s.snd(0, id, 4, "four", 0)
		s.settle(1)
		s.settle(2)
		s.snd(0, id, 4, "four again", 0) // queued: p1 wants another type
		s.stat(0, id, ipcns.IPCStat)
		s.snd(0, id, 1, "one", 0)
		s.settle(1)
		s.stat(0, id, ipcns.IPCStat)
	},
	"blocking-senders": func(s *env) {
		// Each receive makes room for one sleeping sender at most: which
		// of several woken senders runs first is the scheduler's choice.
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.set(0, id, 0, 0, 0o666, 10)
		s.snd(0, id, 1, "12345678", 0)
		s.startSnd(1, id, 2, "big-msg", 0) // 7: waits
		s.settle(1)
		s.snd(0, id, 3, "xy", 0)             // 2: fits now
		s.startSnd(3, id, 4, "abcdefghi", 0) // 9: waits
		s.settle(3)
		s.stat(0, id, ipcns.IPCStat)
		s.rcv(0, id, 100, 1, 0) // 2 left: p1 fits, p3 not
		s.settle(1)
		s.settle(3)
		s.stat(0, id, ipcns.IPCStat)
		s.rcv(0, id, 100, 3, 0) // 7 left: nobody
		s.settle(3)
		s.rcv(0, id, 100, 0, 0) // empty: p3
		s.settle(3)
		s.stat(0, id, ipcns.IPCStat)
		s.rcv(0, id, 100, 0, 0)
	},
	"blocking-senders-skip": func(s *env) {
		// A sender that does not fit does not hold back a later one
		// that does, and keeps its place. (When two woken senders both
		// fit, which runs first is the scheduler's choice: avoided.)
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.set(0, id, 0, 0, 0o666, 12)
		s.snd(0, id, 1, "1234567890", 0)
		s.startSnd(1, id, 2, "aaaaaaaaaaa", 0) // 11
		s.settle(1)
		s.startSnd(2, id, 3, "bbbbb", 0) // 5
		s.settle(2)
		s.startSnd(3, id, 4, "cc", 0) // fits: 12
		s.settle(3)
		s.rcv(0, id, 100, 1, 0) // 10 free: p2 only
		s.settle(1)
		s.settle(2)
		s.stat(0, id, ipcns.IPCStat)
		s.rcv(0, id, 100, 4, 0) // 7 free: nobody
		s.settle(1)
		s.rcv(0, id, 100, 0, 0) // 12 free: p1
		s.settle(1)
		s.stat(0, id, ipcns.IPCStat)
	},
	"sender-receiver-chain": func(s *env) {
		// A receive frees room; the woken sender's message goes straight
		// to a receiver sleeping for its type.
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.set(0, id, 0, 0, 0o666, 4)
		s.snd(0, id, 1, "aaaa", 0)
		s.startRcv(1, id, 100, 7, 0)
		s.settle(1)
		s.startSnd(2, id, 7, "seven", 0)
		s.settle(2)
		s.set(0, id, 0, 0, 0o666, 4)
		s.settle(2)
		s.rcv(0, id, 100, 1, 0)
		s.settle(2) // still does not fit: 5 > 4
		s.set(0, id, 0, 0, 0o666, 5)
		s.settle(2)
		s.settle(1)
		s.stat(0, id, ipcns.IPCStat)
	},
	"rmid-wakes": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.set(0, id, 0, 0, 0o666, 1)
		s.snd(0, id, 1, "", 0)
		s.startSnd(1, id, 1, "", 0)
		s.settle(1)
		s.startRcv(2, id, 10, 5, 0)
		s.settle(2)
		s.startRcv(3, id, 10, 6, 0)
		s.settle(3)
		s.rmid(0, id)
		s.settle(1)
		s.settle(2)
		s.settle(3)
		s.stat(0, id, ipcns.IPCStat)
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
	},
	"interrupt": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.set(0, id, 0, 0, 0o666, 3)
		s.snd(0, id, 1, "abc", 0)
		s.startSnd(1, id, 2, "x", 0)
		s.settle(1)
		s.startRcv(2, id, 10, 9, 0)
		s.settle(2)
		s.interrupt(1)
		s.settle(1)
		s.interrupt(2)
		s.settle(2)
		s.stat(0, id, ipcns.IPCStat)
		s.rcv(0, id, 10, 0, 0)
		s.rcv(0, id, 10, 0, nowait)    // the interrupted send left nothing
		s.snd(0, id, 9, "nin", nowait) // the interrupted receiver takes nothing
		s.stat(0, id, ipcns.IPCStat)
	},
	"ipcset-wakes": func(s *env) {
		id := s.get(0, ipcns.IPCPrivate, 0o666)
		s.set(0, id, 0, 0, 0o666, 4)
		s.snd(0, id, 1, "abcd", 0)
		s.startSnd(1, id, 2, "efgh", 0)
		s.settle(1)
		s.startSnd(2, id, 3, "ijklmnop", 0)
		s.settle(2)
		s.set(0, id, 0, 0, 0o666, 8) // p1 fits, p2 not
		s.settle(1)
		s.settle(2)
		s.set(0, id, 0, 0, 0o600, 16) // p2 fits but may no longer write
		s.settle(2)
		s.creds(3, 1000, 1000)
		s.set(0, id, 0, 0, 0o666, 16)
		s.startRcv(3, id, 100, 9, 0)
		s.settle(3)
		s.set(0, id, 0, 0, 0o660, 16) // p3 may no longer read
		s.settle(3)
		s.creds(3, 0, 0)
		s.stat(0, id, ipcns.IPCStat)
	},
	"info": func(s *env) {
		s.do(0, call{op: opCtl, id: 0, cmd: ipcns.IPCInfo})
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
		a := s.get(0, ipcns.IPCPrivate, 0o600)
		b := s.get(0, ipcns.IPCPrivate, 0o600)
		s.snd(0, a, 1, "abc", 0)
		s.snd(0, b, 1, "defgh", 0)
		s.snd(0, b, 1, "", 0)
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
		s.do(0, call{op: opCtl, id: 99, cmd: ipcns.IPCInfo})
		s.rmid(0, a)
		s.do(0, call{op: opCtl, id: 0, cmd: MsgInfo})
		s.do(0, call{op: opCtl, id: 0, cmd: 14}) // unknown command
	},
}

func TestDifferential(t *testing.T) {
	for name, sc := range scenarios {
		t.Run(name, func(t *testing.T) { diff(t, sc) })
	}
}
