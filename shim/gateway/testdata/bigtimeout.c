/* bigtimeout: semtimedop on a zero semaphore with timeouts too long to
 * expire (the kernel saturates them: ktime_add_safe, or
 * timespec64_to_jiffies's MAX_JIFFY_OFFSET on older kernels): the call
 * sleeps until the parent raises the value. Run natively and under the
 * gateway; the outputs must be identical. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procstate.h"

int main(void) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	int semid = semget(IPC_PRIVATE, 1, 0600);
	if (semid < 0) { perror("semget"); return 1; }
	const long secs[] = {10000, 9000000000L, 10000000000L, LONG_MAX};
	for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
		printf("semtimedop, timeout %lds:\n", secs[i]);
		int res[2];
		if (pipe(res) < 0) { perror("pipe"); return 1; }
		pid_t p = fork();
		if (p == 0) {
			close(res[0]);
			struct sembuf dec = {0, -1, 0};
			struct timespec to = {secs[i], 0};
			errno = 0;
			long r = semtimedop(semid, &dec, 1, &to);
			dprintf(res[1], "  ret=%ld errno=%s\n", r, r < 0 ? strerrorname_np(errno) : "0");
			_exit(0);
		}
		close(res[1]);
		char wchan[128];
		for (int k = 0; k < 20000 && !exited(p); k++) {
			if (taskstate(p, wchan, sizeof wchan) == 'S' && in_call(wchan))
				break;
			struct timespec ts = {0, 500000};
			nanosleep(&ts, NULL);
		}
		printf("  ncnt=%d\n", semctl(semid, 0, GETNCNT));
		struct sembuf inc = {0, 1, 0};
		semop(semid, &inc, 1);
		int st;
		waitpid(p, &st, 0);
		char line[128];
		ssize_t n = read(res[0], line, sizeof line - 1);
		close(res[0]);
		if (n > 0)
			fwrite(line, 1, n, stdout);
		printf("  final=%d\n", semctl(semid, 0, GETVAL));
		semctl(semid, 0, SETVAL, 0);
	}
	semctl(semid, 0, IPC_RMID);
	return 0;
}
