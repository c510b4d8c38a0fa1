/* fuzzprog: random System V semaphore and message-queue calls with random
 * pointers, sizes, flags and commands, from a fixed seed. Each call's result and errno
 * are printed; the output must be identical natively and under the
 * gateway. Waits are made non-blocking (IPC_NOWAIT) so that the program
 * ends. usage: fuzzprog SEED COUNT */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned char *buf; /* 2 pages: the second is PROT_NONE */
static long page;
static int ids[8], qids[4];

static uint64_t rnd(void) { return ((uint64_t)random() << 33) ^ ((uint64_t)random() << 2) ^ random(); }

static uintptr_t ptr(void) {
	switch (rnd() % 8) {
	case 0: return 0;
	case 1: return 8;
	case 2: return (uintptr_t)buf + page - (rnd() % 16); /* runs into the guard page */
	case 3: return 0xffff800000001000ull;                /* kernel */
	case 4: return (uintptr_t)buf + page;                /* guard page */
	default: return (uintptr_t)buf + (rnd() % 64);       /* valid */
	}
}

static long msqid(void) {
	switch (rnd() % 6) {
	case 0: return -1;
	case 1: return (long)(rnd() % 100000);
	case 2: return (long)(int32_t)rnd();
	default: return qids[rnd() % 4];
	}
}

static long msgsize(void) {
	switch (rnd() % 6) {
	case 0: return 0;
	case 1: return -1;
	case 2: return 8192 + rnd() % 3;
	case 3: return (long)(rnd() % 5000);
	default: return (long)(rnd() % 64);
	}
}

/* a small valid mtype at p, when p is in the valid page */
static void set_mtype(uintptr_t p) {
	if (p >= (uintptr_t)buf && p + 8 <= (uintptr_t)buf + page && rnd() % 4)
		*(long *)p = rnd() % 3 ? (long)(1 + rnd() % 5) : (long)(int32_t)rnd();
}

static long semid(void) {
	switch (rnd() % 6) {
	case 0: return -1;
	case 1: return (long)(rnd() % 100000);
	case 2: return (long)(int32_t)rnd();
	default: return ids[rnd() % 8];
	}
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	srandom(argc > 1 ? atoi(argv[1]) : 1);
	int n = argc > 2 ? atoi(argv[2]) : 2000;
	page = sysconf(_SC_PAGESIZE);
	buf = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mprotect(buf + page, page, PROT_NONE);
	for (int i = 0; i < 8; i++)
		ids[i] = semget(IPC_PRIVATE, 1 + i, 0600);
	for (int i = 0; i < 4; i++)
		qids[i] = msgget(IPC_PRIVATE, 0600);
	for (int i = 0; i < n; i++) {
		long r = 0, a0, a1, a2, a3;
		int is_stat = 0;
		const char *what;
		for (int j = 0; j < page; j++)
			buf[j] = rnd();
		/* every sembuf in the valid page is non-blocking */
		for (int j = 0; j + 6 <= page; j += 6)
			buf[j + 5] |= IPC_NOWAIT >> 8;
		errno = 0;
		int kind = rnd() % 8;
		switch (kind < 4 ? kind : 4 + rnd() % 4) {
		case 4:
			what = "msgget";
			a2 = a3 = 0;
			a0 = rnd() % 3 ? (long)(rnd() % 8) : IPC_PRIVATE;
			a1 = (long)(rnd() % 2 ? (IPC_CREAT | 0600) : (int32_t)rnd() & 0xffff);
			r = syscall(SYS_msgget, a0, a1);
			if (r >= 0)
				qids[rnd() % 4] = r;
			break;
		case 5:
			what = "msgsnd";
			a0 = msqid();
			a1 = ptr();
			set_mtype(a1);
			a2 = msgsize();
			a3 = IPC_NOWAIT | (rnd() % 2 ? 0 : (long)((int32_t)rnd() & ~IPC_NOWAIT & 0xffff));
			r = syscall(SYS_msgsnd, a0, a1, a2, a3);
			break;
		case 6: {
			static const long flags[] = {0, MSG_NOERROR, MSG_EXCEPT, MSG_COPY, MSG_COPY | MSG_NOERROR, MSG_COPY | MSG_EXCEPT};
			long typ = rnd() % 3 ? (long)(rnd() % 7) - 3 : (long)rnd();
			what = "msgrcv";
			a0 = msqid();
			a1 = ptr();
			a2 = msgsize();
			a3 = typ;
			/* never sleeps: IPC_NOWAIT except, rarely, a MSG_COPY
			 * without it (EINVAL) */
			long f = flags[rnd() % 6] | (rnd() % 8 ? IPC_NOWAIT : 0);
			if (!(f & IPC_NOWAIT) && !(f & MSG_COPY))
				f |= IPC_NOWAIT;
			r = syscall(SYS_msgrcv, a0, a1, a2, typ, f);
			break;
		}
		case 7: {
			static const int cmds[] = {0, 1, 2, 3, 11, 12, 13, 99, 0x100 | 2, -1};
			what = "msgctl";
			a0 = msqid();
			a1 = cmds[rnd() % 10];
			a2 = 0;
			a3 = (long)ptr();
			if (a1 == 0) /* IPC_RMID of a live queue: rarely */
				a0 = rnd() % 8 ? -1 : a0;
			r = syscall(SYS_msgctl, a0, a1, a3);
			is_stat = a1 == IPC_STAT || a1 == MSG_STAT || a1 == MSG_STAT_ANY;
			if (r >= 0 && is_stat && a3 >= (long)(uintptr_t)buf && a3 + 104 <= (long)(uintptr_t)buf + page)
				memset((char *)(uintptr_t)a3 + 96, 0, 8); /* lspid, lrpid */
			break;
		}
		case 0:
			what = "semget";
			a3 = 0;
			a0 = rnd() % 3 ? (long)(rnd() % 8) : IPC_PRIVATE;
			a1 = (long)(rnd() % 3 ? rnd() % 40 : (int32_t)rnd());
			a2 = (long)(rnd() % 2 ? (IPC_CREAT | 0600) : (int32_t)rnd() & 0xffff);
			r = syscall(SYS_semget, a0, a1, a2);
			if (r >= 0)
				ids[rnd() % 8] = r;
			break;
		case 1:
		case 2: {
			int timed = rnd() % 2;
			what = timed ? "semtimedop" : "semop";
			a0 = semid();
			a1 = ptr();
			switch (rnd() % 5) {
			case 0: a2 = 0; break;
			case 1: a2 = 600; break;
			case 2: a2 = (long)(rnd() % 1000); break;
			case 3: a2 = -1; break;
			default: a2 = 1 + rnd() % 4;
			}
			if (timed) {
				a3 = rnd() % 2 ? 0 : ptr();
				r = syscall(SYS_semtimedop, a0, a1, a2, a3);
			} else {
				a3 = 0;
				r = syscall(SYS_semop, a0, a1, a2);
			}
			break;
		}
		default: {
			what = "semctl";
			static const int cmds[] = {0, 1, 2, 3, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 99, 0x100 | 2};
			a0 = semid();
			a1 = (long)(rnd() % 3 ? rnd() % 10 : (int32_t)rnd());
			a2 = cmds[rnd() % 16];
			a3 = rnd() % 3 ? (long)ptr() : (long)(rnd() % 70000);
			if (a2 == 0) /* IPC_RMID of a live set: rarely */
				a0 = rnd() % 8 ? -1 : a0;
			r = syscall(SYS_semctl, a0, a1, a2, a3);
			is_stat = a2 == IPC_STAT || a2 == SEM_STAT || a2 == SEM_STAT_ANY;
			break;
		}
		}
		/* A successful *_STAT wrote times (otime/stime, rtime, ctime
		 * at +48, +56, +64 in semid64_ds and msqid64_ds) that differ
		 * between two runs: clear them. */
		if (r >= 0 && is_stat && a3 >= (long)(uintptr_t)buf && a3 + 72 <= (long)(uintptr_t)buf + page)
			memset((char *)(uintptr_t)a3 + 48, 0, 24);
		/* Some results depend on what the call wrote: print a digest of
		 * the valid page too. */
		unsigned h = 0;
		for (int j = 0; j < 256; j++)
			h = h * 31 + buf[j];
		/* pointers into buf are printed relative to it (ASLR) */
		long b = (long)(uintptr_t)buf, p1 = a1 - b, p3 = a3 - b;
		int in1 = p1 >= 0 && p1 <= 2 * page, in3 = p3 >= 0 && p3 <= 2 * page;
		printf("%d %s(%ld,%s%#lx,%ld,%s%#lx) = %ld %s %08x\n", i, what, a0, in1 ? "buf+" : "", in1 ? p1 : a1, a2,
		       in3 ? "buf+" : "", in3 ? p3 : a3, r, r < 0 ? strerrorname_np(errno) : "", h);
	}
	return 0;
}
