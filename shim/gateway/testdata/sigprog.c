/* sigprog: how blocked System V IPC calls react to signals. Run natively
 * (the oracle) and under the gateway; the outputs must be identical.
 *
 * For each case a child blocks in a call that cannot proceed; the parent
 * signals it, checks the waiter counts the kernel reports, and then makes
 * the call possible. The child prints what its call returned. */
#define _GNU_SOURCE
#include <errno.h>
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

static void msleep(int ms) {
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR);
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

static void child(enum call c, enum how h) {
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
	printf("  %s: ret=%ld errno=%s handled=%d\n", calls[c], r, r < 0 ? strerrorname_np(errno) : "0", handled);
	fflush(stdout);
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
	pid_t p = fork();
	if (p == 0)
		child(c, h);
	msleep(100);
	if (h == H_STOPCONT || h == H_STOPCONT_HANDLER) {
		kill(p, SIGSTOP);
		msleep(50);
		kill(p, SIGCONT);
	} else {
		kill(p, SIGUSR1);
	}
	msleep(100);
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
