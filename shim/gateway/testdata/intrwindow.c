/* intrwindow: a child's blocking call (msgrcv on an empty queue, msgsnd on
 * a full one, semop -1 on a zero semaphore) is interrupted by a signal
 * whose handler has SA_RESTART; then the parent makes the call possible
 * and prints what the child's call returned and what is left. Natively
 * all three fail with EINTR (man 7 signal: none is restarted after a
 * handler), and what the parent did stays in place.
 *
 * usage: intrwindow CALL self|hook [REPS]
 *
 * "self": the parent sends the signal once the child is asleep in the
 * call (the native run). "hook": someone else does (the gateway test
 * signals the child from inside the gateway, between reading its
 * notification and binding it to the thread); the parent only waits.
 * Either way the parent acts once the handler ran (it writes to a pipe)
 * and the child is gone or asleep in the call again. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int sigpipe[2];
static volatile sig_atomic_t handled;
static void on_sig(int s) {
	(void)s;
	handled++;
	(void)!write(sigpipe[1], "s", 1);
}

#include "procstate.h"

/* await waits (10 s at most) until child p is asleep in the call, or,
 * with gone_ok, gone. */
static int await(pid_t p, int gone_ok) {
	char wchan[128];
	for (int i = 0; i < 100000; i++) {
		if (gone_ok && exited(p))
			return 0;
		if (taskstate(p, wchan, sizeof wchan) == 'S' && in_call(wchan))
			return 0;
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
	char st = taskstate(p, wchan, sizeof wchan);
	printf("TIMEOUT waiting for the child (state %c, wchan %s)\n", st, wchan);
	return -1;
}

struct msg8 { long type; char text[8]; };

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: intrwindow msgrcv|msgsnd|semop self|hook [reps]\n");
		return 2;
	}
	const char *call = argv[1];
	int self = strcmp(argv[2], "self") == 0;
	int reps = argc > 3 ? atoi(argv[3]) : 1;
	int semid = semget(IPC_PRIVATE, 1, 0600), msqid = msgget(IPC_PRIVATE, 0600);
	if (semid < 0 || msqid < 0 || pipe(sigpipe) < 0) {
		perror("setup");
		return 1;
	}
	for (int i = 0; i < reps; i++) {
		struct msg8 m = {1, "x"};
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		ds.msg_qbytes = 8;
		msgctl(msqid, IPC_SET, &ds);
		if (strcmp(call, "msgsnd") == 0)
			msgsnd(msqid, &m, 8, 0); /* full */
		int res[2];
		if (pipe(res) < 0)
			return 1;
		pid_t p = fork();
		if (p == 0) {
			struct sigaction sa;
			memset(&sa, 0, sizeof sa);
			sa.sa_handler = on_sig;
			sa.sa_flags = SA_RESTART;
			sigaction(SIGUSR1, &sa, NULL);
			struct sembuf dec = {0, -1, 0};
			long r;
			if (strcmp(call, "msgrcv") == 0)
				r = msgrcv(msqid, &m, 8, 1, 0);
			else if (strcmp(call, "msgsnd") == 0)
				r = msgsnd(msqid, &m, 8, 0);
			else
				r = semop(semid, &dec, 1);
			dprintf(res[1], "child ret=%ld errno=%s handled=%d", r, r < 0 ? strerrorname_np(errno) : "0", handled);
			_exit(0);
		}
		close(res[1]);
		/* with "hook" the signal may come before the child is seen
		 * asleep, and the call end at once */
		if (await(p, !self) < 0)
			goto timeout;
		if (self)
			kill(p, SIGUSR1);
		struct pollfd pfd = {sigpipe[0], POLLIN, 0};
		if (poll(&pfd, 1, 10000) != 1) {
			printf("TIMEOUT waiting for the handler\n");
			goto timeout;
		}
		char b;
		(void)!read(sigpipe[0], &b, 1);
		if (await(p, 1) < 0)
			goto timeout;
		/* make the call possible */
		struct sembuf inc = {0, 1, 0};
		if (strcmp(call, "msgrcv") == 0)
			msgsnd(msqid, &m, 8, 0);
		else if (strcmp(call, "msgsnd") == 0)
			msgrcv(msqid, &m, 8, 0, 0);
		else
			semop(semid, &inc, 1);
		waitpid(p, NULL, 0);
		char line[128];
		ssize_t r = read(res[0], line, sizeof line - 1);
		close(res[0]);
		line[r > 0 ? r : 0] = 0;
		msgctl(msqid, IPC_STAT, &ds);
		printf("%s: %s | qnum=%lu semval=%d\n", call, line, (unsigned long)ds.msg_qnum, semctl(semid, 0, GETVAL));
		/* empty the queue, zero the semaphore */
		while (msgrcv(msqid, &m, 8, 0, IPC_NOWAIT) >= 0)
			;
		semctl(semid, 0, SETVAL, 0);
		continue;
	timeout:
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
		return 1;
	}
	semctl(semid, 0, IPC_RMID);
	msgctl(msqid, IPC_RMID, NULL);
	return 0;
}
