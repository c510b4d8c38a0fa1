/* awaitdup: a receiver whose process has a signal pending and blocked
 * (so the gateway cannot rule out a signal racing with its answers)
 * takes a message, calls msgrcv again with the same arguments, and is
 * interrupted there by a signal whose handler has SA_RESTART. Natively
 * (man 7 signal) the second msgrcv fails with EINTR, and the message,
 * received once, is gone from the queue. Run natively and under the
 * gateway; the outputs must be identical.
 *
 * usage: awaitdup [REPS]
 *        awaitdup plain [REPS]: the same with no signal pending: the
 *        first answer goes as a plain SEND (the signal comes after it).
 *        With AWAITDUP_SIGNALLER=test in the environment the parent
 *        sends no signal: the test does, once the gateway's SEND is
 *        past (TestAwaitAfterSendDifferential).
 *        awaitdup stall N [blocked]: the child receives N messages sent
 *        one at a time, each once it sleeps in msgrcv; with "blocked" its
 *        process has a signal pending and blocked meanwhile. Prints the
 *        count received: the test measures the time. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procstate.h"

static volatile sig_atomic_t handled;
static void on_sig(int s) { (void)s; handled++; }

struct msg8 { long type; char text[8]; };

static int stall(int n, int blocked) {
	int msqid = msgget(IPC_PRIVATE, 0600);
	if (msqid < 0) { perror("msgget"); return 1; }
	pid_t p = fork();
	if (p == 0) {
		if (blocked) {
			sigset_t set;
			sigemptyset(&set);
			sigaddset(&set, SIGUSR2);
			sigprocmask(SIG_BLOCK, &set, NULL);
			raise(SIGUSR2);
		}
		struct msg8 m;
		int k = 0;
		for (; k < n; k++)
			if (msgrcv(msqid, &m, sizeof m.text, 0, 0) < 0)
				break;
		printf("received %d\n", k);
		_exit(0);
	}
	for (int k = 0; k < n; k++) {
		await_asleep(p);
		struct msg8 m = {1, "x"};
		msgsnd(msqid, &m, sizeof m.text, 0);
	}
	int st;
	waitpid(p, &st, 0);
	msgctl(msqid, IPC_RMID, NULL);
	return 0;
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 2 && strcmp(argv[1], "stall") == 0)
		return stall(atoi(argv[2]), argc > 3);
	int blocked = 1;
	if (argc > 1 && strcmp(argv[1], "plain") == 0) {
		blocked = 0;
		argc--;
		argv++;
	}
	int reps = argc > 1 ? atoi(argv[1]) : 5;
	const char *signaller = getenv("AWAITDUP_SIGNALLER");
	int parent_signals = !signaller || strcmp(signaller, "test") != 0;
	int msqid = msgget(IPC_PRIVATE, 0600);
	if (msqid < 0) { perror("msgget"); return 1; }
	for (int i = 0; i < reps; i++) {
		printf("rep %d:\n", i);
		int res[2], got[2];
		if (pipe(res) < 0 || pipe(got) < 0) { perror("pipe"); return 1; }
		pid_t p = fork();
		if (p == 0) {
			close(res[0]);
			close(got[0]);
			if (blocked) {
				sigset_t set;
				sigemptyset(&set);
				sigaddset(&set, SIGUSR2);
				sigprocmask(SIG_BLOCK, &set, NULL);
				raise(SIGUSR2); /* pending, blocked: never taken */
			}
			struct sigaction sa;
			memset(&sa, 0, sizeof sa);
			sa.sa_handler = on_sig;
			sa.sa_flags = SA_RESTART;
			sigaction(SIGUSR1, &sa, NULL);
			struct msg8 m;
			for (int k = 0; k < 3; k++) {
				memset(&m, 0, sizeof m);
				errno = 0;
				/* syscall(2) with every argument register set, as a
				 * loop whose registers do not change between calls */
				long r = syscall(SYS_msgrcv, msqid, &m, sizeof m.text, 0L, k == 2 ? IPC_NOWAIT : 0, 0L);
				dprintf(res[1], "  msgrcv %d: ret=%ld errno=%s text=%.8s handled=%d\n", k, r,
					r < 0 ? strerrorname_np(errno) : "0", r < 0 ? "" : m.text, handled);
				if (k == 0)
					(void)!write(got[1], "g", 1);
			}
			_exit(0);
		}
		close(res[1]);
		close(got[1]);
		await_asleep(p);
		struct msg8 m = {1, "one"};
		msgsnd(msqid, &m, sizeof m.text, 0);
		char c;
		(void)!read(got[0], &c, 1); /* the child took the message */
		if (parent_signals) {
			await_asleep(p); /* and sleeps in its second msgrcv */
			kill(p, SIGUSR1);
		}
		int st;
		waitpid(p, &st, 0);
		char out[512];
		ssize_t n = read(res[0], out, sizeof out - 1);
		if (n > 0)
			fwrite(out, 1, n, stdout);
		close(res[0]);
		close(got[0]);
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		printf("  final: qnum=%lu\n", (unsigned long)ds.msg_qnum);
		while (msgrcv(msqid, &m, 8, 0, IPC_NOWAIT) >= 0)
			;
	}
	msgctl(msqid, IPC_RMID, NULL);
	return 0;
}
