/* handlercall: a blocked System V IPC call interrupted by a signal whose
 * handler has SA_RESTART, where the handler itself makes an IPC call, or
 * leaves with siglongjmp and the call is then made again. Run natively
 * (the oracle) and under the gateway; the outputs must be identical.
 *
 * Natively (man 7 signal) semop and msgrcv fail with EINTR after any
 * handler, whatever the handler does meanwhile; a call made afresh after
 * a siglongjmp out of the handler is a new call and sleeps.
 *
 * usage: handlercall [longjmp] (the handler's calls, or the siglongjmp
 * cases only) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
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

static int semid, msqid, syncfd[2];
static volatile sig_atomic_t handled;
static sigjmp_buf jb;

enum how { H_GETVAL, H_MSGSTAT, H_SEMOP, H_LONGJMP };
static const char *hows[] = {"handler calls semctl(GETVAL)", "handler calls msgctl(IPC_STAT)",
	"handler calls semop(+1) on another semaphore", "handler siglongjmps, call made again"};
static enum how how;

static void on_sig(int s) {
	(void)s;
	handled++;
	struct msqid_ds ds;
	struct sembuf inc1 = {1, 1, 0};
	switch (how) {
	case H_GETVAL: semctl(semid, 1, GETVAL); break;
	case H_MSGSTAT: msgctl(msqid, IPC_STAT, &ds); break;
	case H_SEMOP: semop(semid, &inc1, 1); break;
	case H_LONGJMP: siglongjmp(jb, 1);
	}
	(void)!write(syncfd[1], "s", 1);
}

static void child(int msg, int out) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sig;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	struct sembuf dec = {0, -1, 0};
	struct { long type; char text[8]; } m = {0, ""};
	long r;
	int jumped = 0;
	if (sigsetjmp(jb, 1))
		jumped++;
	errno = 0;
	/* syscall(2) with every argument register set: the registers of a
	 * call made again are those of the first */
	if (msg)
		r = syscall(SYS_msgrcv, msqid, &m, sizeof m.text, 0L, 0, 0L);
	else
		r = syscall(SYS_semtimedop, semid, &dec, 1, NULL, 0L, 0L);
	dprintf(out, "  child: %s ret=%ld errno=%s handled=%d jumped=%d\n", msg ? "msgrcv" : "semop", r,
		r < 0 ? strerrorname_np(errno) : "0", handled, jumped);
	_exit(0);
}

static void one(enum how h, int msg) {
	how = h;
	unsigned short init[2] = {0, 0};
	union { int val; unsigned short *arr; } u = {.arr = init};
	semctl(semid, 0, SETALL, u);
	printf("%s, %s:\n", msg ? "msgrcv" : "semop", hows[h]);
	fflush(stdout);
	int res[2];
	if (pipe(res) < 0 || pipe(syncfd) < 0) { perror("pipe"); exit(1); }
	pid_t p = fork();
	if (p == 0) {
		close(res[0]);
		close(syncfd[0]);
		child(msg, res[1]);
	}
	close(res[1]);
	close(syncfd[1]);
	await_asleep(p);
	kill(p, SIGUSR1);
	if (h != H_LONGJMP) {
		char c;
		(void)!read(syncfd[0], &c, 1); /* the handler's call is done */
	}
	await_asleep(p);
	if (msg) {
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		printf("  after signal: qnum=%lu\n", (unsigned long)ds.msg_qnum);
	} else {
		printf("  after signal: ncnt=%d\n", semctl(semid, 0, GETNCNT));
	}
	fflush(stdout);
	struct sembuf inc = {0, 1, 0};
	struct { long type; char text[8]; } m = {1, "y"};
	if (msg)
		msgsnd(msqid, &m, 8, 0);
	else
		semop(semid, &inc, 1);
	int st;
	waitpid(p, &st, 0);
	char line[256];
	ssize_t n = read(res[0], line, sizeof line - 1);
	close(res[0]);
	close(syncfd[0]);
	if (n <= 0)
		printf("  child printed nothing (status %#x)\n", st);
	else
		fwrite(line, 1, n, stdout);
	if (msg) {
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		printf("  final: qnum=%lu\n", (unsigned long)ds.msg_qnum);
		while (msgrcv(msqid, &m, 8, 0, IPC_NOWAIT) >= 0)
			;
	} else {
		printf("  final: sem0=%d sem1=%d\n", semctl(semid, 0, GETVAL), semctl(semid, 1, GETVAL));
	}
	fflush(stdout);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	int lj = argc > 1 && strcmp(argv[1], "longjmp") == 0;
	semid = semget(IPC_PRIVATE, 2, 0600);
	msqid = msgget(IPC_PRIVATE, 0600);
	if (semid < 0 || msqid < 0) { perror("get"); return 1; }
	for (int msg = 0; msg <= 1; msg++)
		for (int h = lj ? H_LONGJMP : H_GETVAL; h <= (lj ? H_LONGJMP : H_SEMOP); h++)
			one(h, msg);
	semctl(semid, 0, IPC_RMID);
	msgctl(msqid, IPC_RMID, NULL);
	return 0;
}
