/* sigprog: how blocked System V IPC calls react to signals. Run natively
 * (the oracle) and under the gateway; the outputs must be identical.
 *
 * For each case a child blocks in a call that cannot proceed; the parent
 * signals it, checks the waiter counts the kernel reports, and then makes
 * the call possible. The child prints what its call returned.
 *
 * No step depends on timing: the parent waits for the states it needs,
 * read from /proc/<pid>/stat and /proc/<pid>/wchan: the child asleep in its
 * call (natively in do_msgrcv, do_msgsnd or __do_semtimedop; under the
 * gateway in seccomp_do_user_notification) before the signal, stopped
 * after SIGSTOP, and after the signal either gone or asleep in the call
 * again. A state not reached in 10 s prints a TIMEOUT line (a difference).
 * The child's result goes through a pipe and is printed by the parent after
 * it reaped the child, so the order of the lines is fixed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

static volatile sig_atomic_t handled;
static void on_sig(int s) { (void)s; handled++; }

#include "procstate.h"

enum want { W_ASLEEP, W_STOPPED, W_SETTLED };
static const char *wants[] = {"asleep in the call", "stopped", "gone or asleep in the call"};

/* await waits until child p is in state w, polling every 0.5 ms. */
static void await(pid_t p, enum want w) {
	char wchan[128];
	char st = '?';
	for (int i = 0; i < 20000; i++) {
		if (w == W_SETTLED && exited(p))
			return;
		st = taskstate(p, wchan, sizeof wchan);
		if (w == W_STOPPED ? st == 'T' : st == 'S' && in_call(wchan))
			return;
		struct timespec ts = {0, 500000};
		nanosleep(&ts, NULL);
	}
	printf("  TIMEOUT waiting for the child to be %s: state %c wchan %s\n", wants[w], st, wchan);
	fflush(stdout);
}

enum how { H_NORESTART, H_RESTART, H_STOPCONT, H_IGNORED, H_STOPCONT_HANDLER };
static const char *hows[] = {"handler", "handler+SA_RESTART", "stop+cont", "ignored", "stop+cont(SIGCONT handler)"};

enum call { C_SEMOP, C_SEMTIMEDOP, C_SEMOP_ZERO, C_MSGRCV, C_MSGSND };
static const char *calls[] = {"semop", "semtimedop", "semop(wait-for-zero)", "msgrcv", "msgsnd"};

static int semid, msqid;
static int use_msg;

static void install(enum how h) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sig;
	if (h == H_RESTART)
		sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	if (h == H_STOPCONT_HANDLER)
		sigaction(SIGCONT, &sa, NULL);
	if (h == H_IGNORED)
		signal(SIGUSR1, SIG_IGN);
}

static void child(enum call c, enum how h, int out) {
	install(h);
	struct sembuf dec = {0, -1, 0}, zero = {1, 0, 0};
	struct { long type; char text[8]; } m = {1, "x"};
	struct timespec to = {30, 0};
	long r;
	errno = 0;
	switch (c) {
	case C_SEMOP: r = semop(semid, &dec, 1); break;
	case C_SEMTIMEDOP: r = semtimedop(semid, &dec, 1, &to); break;
	case C_SEMOP_ZERO: r = semop(semid, &zero, 1); break;
	case C_MSGRCV: r = msgrcv(msqid, &m, sizeof m.text, 1, 0); break;
	default: r = msgsnd(msqid, &m, 8, 0); break;
	}
	dprintf(out, "  %s: ret=%ld errno=%s handled=%d\n", calls[c], r, r < 0 ? strerrorname_np(errno) : "0", handled);
	_exit(0);
}

static void one(enum call c, enum how h) {
	union { int val; unsigned short *arr; } u;
	unsigned short init[2] = {0, 1};
	u.arr = init;
	semctl(semid, 0, SETALL, u);
	printf("%s, %s:\n", calls[c], hows[h]);
	fflush(stdout);
	if (c == C_MSGSND) { /* fill the queue so that msgsnd blocks */
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		ds.msg_qbytes = 8;
		msgctl(msqid, IPC_SET, &ds);
		struct { long type; char text[8]; } m = {2, "fill"};
		msgsnd(msqid, &m, 8, 0);
	}
	int res[2];
	if (pipe(res) < 0) { perror("pipe"); exit(1); }
	pid_t p = fork();
	if (p == 0) {
		close(res[0]);
		child(c, h, res[1]);
	}
	close(res[1]);
	await(p, W_ASLEEP);
	if (h == H_STOPCONT || h == H_STOPCONT_HANDLER) {
		kill(p, SIGSTOP);
		await(p, W_STOPPED);
		kill(p, SIGCONT);
	} else {
		kill(p, SIGUSR1);
	}
	await(p, W_SETTLED);
	if (c <= C_SEMOP_ZERO)
		printf("  after signal: ncnt=%d zcnt=%d\n", semctl(semid, 0, GETNCNT), semctl(semid, 1, GETZCNT));
	else {
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		printf("  after signal: qnum=%lu\n", (unsigned long)ds.msg_qnum);
	}
	fflush(stdout);
	/* make the call possible */
	struct sembuf inc = {0, 1, 0}, clr = {1, -1, 0};
	struct { long type; char text[8]; } m = {1, "y"};
	switch (c) {
	case C_SEMOP: case C_SEMTIMEDOP: semop(semid, &inc, 1); break;
	case C_SEMOP_ZERO: semop(semid, &clr, 1); break;
	case C_MSGRCV: msgsnd(msqid, &m, 8, 0); break;
	default: msgrcv(msqid, &m, 8, 2, 0); break;
	}
	int st;
	waitpid(p, &st, 0);
	char line[256];
	ssize_t n = read(res[0], line, sizeof line - 1);
	close(res[0]);
	if (n <= 0)
		printf("  child printed nothing (status %#x)\n", st);
	else
		fwrite(line, 1, n, stdout);
	if (c <= C_SEMOP_ZERO)
		printf("  final: sem0=%d sem1=%d\n", semctl(semid, 0, GETVAL), semctl(semid, 1, GETVAL));
	else {
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		printf("  final: qnum=%lu\n", (unsigned long)ds.msg_qnum);
		while (msgrcv(msqid, &m, 8, 0, IPC_NOWAIT) >= 0);
	}
	fflush(stdout);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	use_msg = argc > 1 && strcmp(argv[1], "msg") == 0;
	semid = semget(IPC_PRIVATE, 2, 0600);
	if (semid < 0) { perror("semget"); return 1; }
	int last = C_SEMOP_ZERO, first = C_SEMOP;
	if (use_msg) {
		msqid = msgget(IPC_PRIVATE, 0600);
		if (msqid < 0) { perror("msgget"); return 1; }
		first = C_MSGRCV;
		last = C_MSGSND;
	}
	for (int c = first; c <= last; c++)
		for (int h = H_NORESTART; h <= H_STOPCONT_HANDLER; h++)
			one(c, h);
	semctl(semid, 0, IPC_RMID);
	if (use_msg)
		msgctl(msqid, IPC_RMID, NULL);
	return 0;
}
