/* setxid: a thread asleep in semop (or msgrcv) while another thread of
 * its process calls setgid(2). glibc makes every thread run the set*id
 * call with a signal (SIGSETXID, handler with SA_RESTART); natively the
 * sleeper's call fails with EINTR (man 7 signal: neither is restarted
 * after a handler), and nothing of it stays queued. Under the gateway the
 * handler's setgid is trapped and let run, and the thread's identity is
 * read again at its next call: that must not lose the call that the
 * signal interrupted (its restart is answered EINTR) or leave it queued.
 *
 * usage: setxid semop|msgrcv [REPS]
 * Waits for states in /proc, never a fixed pause. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procstate.h"

static int semid, msqid, msgcall;
static volatile pid_t sleeper_tid;
static volatile int done;
static long rc;
static int err;

struct msg8 { long type; char text[8]; };

static void *sleeper(void *a) {
	(void)a;
	sleeper_tid = gettid();
	struct sembuf op = {0, -1, 0};
	struct msg8 m;
	rc = msgcall ? msgrcv(msqid, &m, 8, 0, 0) : semop(semid, &op, 1);
	err = errno;
	__atomic_store_n(&done, 1, __ATOMIC_SEQ_CST);
	return 0;
}

static void pause_short(void) {
	struct timespec ts = {0, 100000};
	nanosleep(&ts, NULL);
}

/* asleep reports whether the sleeper is asleep in its call (the kernel's
 * wait, or the trap's). */
static int asleep(void) {
	char wchan[128];
	return taskstate(sleeper_tid, wchan, sizeof wchan) == 'S' && in_call(wchan);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return 2;
	msgcall = strcmp(argv[1], "msgrcv") == 0;
	int reps = argc > 2 ? atoi(argv[2]) : 10;
	semid = semget(IPC_PRIVATE, 1, 0600);
	msqid = msgget(IPC_PRIVATE, 0600);
	if (semid < 0 || msqid < 0) {
		perror("setup");
		return 1;
	}
	for (int i = 0; i < reps; i++) {
		done = 0;
		sleeper_tid = 0;
		pthread_t t;
		pthread_create(&t, NULL, sleeper, NULL);
		int k;
		for (k = 0; k < 100000 && !(sleeper_tid && asleep()); k++)
			pause_short();
		if (k == 100000) {
			printf("TIMEOUT waiting for the sleeper\n");
			return 1;
		}
		/* Every thread runs setgid through SIGSETXID before it returns. */
		if (setgid(getgid()) != 0)
			perror("setgid");
		/* The sleeper's call has ended (natively, EINTR) or sleeps again. */
		for (k = 0; k < 100000 && !__atomic_load_n(&done, __ATOMIC_SEQ_CST) && !asleep(); k++)
			pause_short();
		int cnt = msgcall ? -1 : semctl(semid, 0, GETNCNT);
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		int qwait = -1;
		/* wake it if it still sleeps */
		if (msgcall) {
			struct msg8 m = {1, "x"};
			msgsnd(msqid, &m, 8, 0);
		} else {
			struct sembuf up = {0, 1, 0};
			semop(semid, &up, 1);
		}
		pthread_join(t, NULL);
		msgctl(msqid, IPC_STAT, &ds);
		qwait = (int)ds.msg_qnum;
		printf("%s: ncnt after setgid=%d | rc=%ld errno=%s | after: semval=%d qnum=%d\n", argv[1], cnt, rc,
		       rc < 0 ? strerrorname_np(err) : "0", semctl(semid, 0, GETVAL), qwait);
		/* reset: empty the queue, zero the semaphore */
		struct msg8 m;
		while (msgrcv(msqid, &m, 8, 0, IPC_NOWAIT) >= 0)
			;
		semctl(semid, 0, SETVAL, 0);
	}
	semctl(semid, 0, IPC_RMID);
	msgctl(msqid, IPC_RMID, NULL);
	return 0;
}
