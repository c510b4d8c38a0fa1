/* ctlbufs: every semctl and msgctl command that reads or writes a caller
 * buffer, given bad buffers: NULL, a PROT_NONE page, a read-only page, a
 * buffer running from a writable page into a PROT_NONE one, and a
 * kernel-half address; each also with a bad id and (after dropping
 * privileges) without permission, so that the order of the checks shows
 * (Linux checks the id and permission before it copies, and copies a
 * result out only after computing it). Prints the return value, errno
 * and whether a read-only or straddling buffer changed. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SEM_STAT_ANY
#define SEM_STAT_ANY 20
#endif
#ifndef MSG_STAT_ANY
#define MSG_STAT_ANY 13
#endif

static long pg;
static char *rw, *none, *ro, *straddle;

struct target {
	const char *name;
	void *p;
};

static void show(const char *what, const char *buf, long r) {
	printf("%s\n  ret=%ld errno=%s\n", what, r, r < 0 ? strerrorname_np(errno) : "0");
	(void)buf;
}

/* bytes changed in a page that began all 0x5a */
static int changed(const char *p, size_t n) {
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] != 0x5a)
			return 1;
	return 0;
}

static void reset(void) {
	mprotect(ro, pg, PROT_READ | PROT_WRITE);
	memset(ro, 0x5a, pg);
	mprotect(ro, pg, PROT_READ);
	memset(rw, 0x5a, pg);
}

static long semctl_raw(int id, int n, int cmd, void *arg) {
	return syscall(SYS_semctl, id, n, cmd, arg);
}
static long msgctl_raw(int id, int cmd, void *arg) {
	return syscall(SYS_msgctl, id, cmd, arg);
}

int main(void) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	pg = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	rw = m;
	ro = m + pg;
	none = m + 3 * pg;
	mprotect(none, pg, PROT_NONE);
	straddle = none - 8; /* 8 writable bytes, then PROT_NONE */
	reset();

	int semid = semget(IPC_PRIVATE, 3, 0600);
	int msqid = msgget(IPC_PRIVATE, 0600);
	if (semid < 0 || msqid < 0) {
		perror("setup");
		return 1;
	}
	unsigned short vals[3] = {1, 2, 3};
	semctl(semid, 0, SETALL, vals);

	struct target tg[] = {
		{"NULL", NULL},
		{"PROT_NONE", none},
		{"read-only", ro},
		{"straddle", straddle},
		{"kernel", (void *)0xffff800000000000UL},
	};
	struct {
		const char *name;
		int cmd;
		int writes; /* the command writes the buffer (else reads it) */
	} semcmds[] = {
		{"IPC_STAT", IPC_STAT, 1}, {"SEM_STAT", SEM_STAT, 1}, {"SEM_STAT_ANY", SEM_STAT_ANY, 1},
		{"IPC_INFO", IPC_INFO, 1}, {"SEM_INFO", SEM_INFO, 1}, {"GETALL", GETALL, 1},
		{"SETALL", SETALL, 0}, {"IPC_SET", IPC_SET, 0},
	}, msgcmds[] = {
		{"IPC_STAT", IPC_STAT, 1}, {"MSG_STAT", MSG_STAT, 1}, {"MSG_STAT_ANY", MSG_STAT_ANY, 1},
		{"IPC_INFO", IPC_INFO, 1}, {"MSG_INFO", MSG_INFO, 1}, {"IPC_SET", IPC_SET, 0},
	};
	char name[160];
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			/* without permission: owner is root, mode 0600 */
			if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534)) {
				perror("setresuid");
				return 1;
			}
		}
		const char *who = pass ? "nobody" : "owner";
		for (size_t c = 0; c < sizeof semcmds / sizeof semcmds[0]; c++)
			for (size_t i = 0; i < sizeof tg / sizeof tg[0]; i++)
				for (int badid = 0; badid < 2; badid++) {
					int id = badid ? semid + 1 : semid;
					/* the *_STAT commands take an index, not an id */
					if (semcmds[c].cmd == SEM_STAT || semcmds[c].cmd == SEM_STAT_ANY)
						id = badid ? 31999 : 0;
					reset();
					long r = semctl_raw(id, 0, semcmds[c].cmd, tg[i].p);
					snprintf(name, sizeof name, "semctl %s %s buf, %s id, %s", semcmds[c].name, tg[i].name,
						 badid ? "bad" : "good", who);
					show(name, NULL, r);
					if (tg[i].p == ro || tg[i].p == straddle)
						printf("  changed=%d\n", tg[i].p == ro ? changed(ro, pg) : changed(straddle, 8));
				}
		for (size_t c = 0; c < sizeof msgcmds / sizeof msgcmds[0]; c++)
			for (size_t i = 0; i < sizeof tg / sizeof tg[0]; i++)
				for (int badid = 0; badid < 2; badid++) {
					int id = badid ? msqid + 1 : msqid;
					if (msgcmds[c].cmd == MSG_STAT || msgcmds[c].cmd == MSG_STAT_ANY)
						id = badid ? 31999 : 0;
					reset();
					long r = msgctl_raw(id, msgcmds[c].cmd, tg[i].p);
					snprintf(name, sizeof name, "msgctl %s %s buf, %s id, %s", msgcmds[c].name, tg[i].name,
						 badid ? "bad" : "good", who);
					show(name, NULL, r);
					if (tg[i].p == ro || tg[i].p == straddle)
						printf("  changed=%d\n", tg[i].p == ro ? changed(ro, pg) : changed(straddle, 8));
				}
	}
	/* the set and queue stay (IPC_PRIVATE, the namespace goes with the run) */
	return 0;
}
