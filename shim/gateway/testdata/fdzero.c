/* fdzero: a thread with a file table of its own (unshare(CLONE_FILES))
 * whose fd 0 differs from its process leader's makes semop calls that
 * succeed at once, while its process has a signal pending and blocked
 * (so that an answer could race with a signal, as far as a supervisor
 * can tell). Natively semop touches no file descriptor: the thread's fd
 * 0 and the leader's stay what they were. Run natively and under the
 * gateway; the outputs must be identical. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <unistd.h>

static int semid;

static void fd0(const char *who) {
	char buf[256];
	ssize_t n = readlink("/proc/thread-self/fd/0", buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	/* only the kind of file: paths differ between runs */
	printf("  %s fd 0: %s\n", who, n <= 0 ? "none" : strncmp(buf, "pipe:", 5) == 0 ? "a pipe" : strcmp(buf, "/dev/null") == 0 ? "/dev/null" : "another file");
}

static void *thread(void *arg) {
	(void)arg;
	if (unshare(CLONE_FILES) < 0) { perror("unshare"); exit(1); }
	int p[2];
	if (pipe(p) < 0) { perror("pipe"); exit(1); }
	dup2(p[0], 0);
	fd0("thread, before");
	struct sembuf inc = {0, 1, 0};
	int bad = 0;
	for (int i = 0; i < 20; i++)
		if (semop(semid, &inc, 1) < 0)
			bad++;
	printf("  semop +1 x20: %d failed, value %d\n", bad, semctl(semid, 0, GETVAL));
	fd0("thread, after");
	return NULL;
}

int main(void) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	int null = open("/dev/null", O_RDONLY);
	dup2(null, 0);
	semid = semget(IPC_PRIVATE, 1, 0600);
	if (semid < 0) { perror("semget"); return 1; }
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);
	kill(getpid(), SIGUSR2); /* pending for the process, blocked everywhere */
	printf("thread with its own fd table:\n");
	fd0("leader");
	pthread_t t;
	pthread_create(&t, NULL, thread, NULL);
	pthread_join(t, NULL);
	fd0("leader");
	semctl(semid, 0, IPC_RMID);
	return 0;
}
