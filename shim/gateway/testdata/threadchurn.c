/* threadchurn N K: one process creates N short-lived threads, at most K
 * alive at a time; thread i makes one semop, of +1 on semaphore i%8 (no
 * undo) and on semaphore 8+i%8 (SEM_UNDO) of the set with key 0x7c, then
 * exits. (Eight of each keeps values and adjustments under SEMVMX up to
 * N = 262,136.)
 *
 * Protocol on stdin/stdout, so that the test can look at the gateway
 * while the process is alive:
 *   prints "ready", waits for a line;
 *   runs the threads, prints "done N failures F values V0 V1" (V0: the
 *   sum of semaphores 0-7, V1: of 8-15), waits for a line, exits (leaving
 *   the set, for the test to read the SEM_UNDO adjustments applied at the
 *   process's exit).
 * A thread's exit must not apply the process's SEM_UNDO: V1 is N. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <unistd.h>

static int id;
static long failures;
static int firsterr;

static void *one(void *arg)
{
	unsigned short i = (unsigned long)arg % 8;
	struct sembuf ops[2] = {{i, 1, 0}, {8 + i, 1, SEM_UNDO}};
	if (syscall(SYS_semop, id, ops, 2) != 0) {
		__atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&firsterr, errno, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

static void waitline(void)
{
	char buf[64];
	if (!fgets(buf, sizeof buf, stdin))
		exit(3);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	long n = atol(argv[1]);
	int k = atoi(argv[2]);
	if (n < 0 || n > 262136 || k < 1 || k > 64)
		return 2;
	id = syscall(SYS_semget, 0x7c, 16, IPC_CREAT | 0600);
	if (id < 0) {
		perror("semget");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	waitline();

	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 << 10);
	pthread_t th[64];
	long started = 0, joined = 0;
	while (joined < n) {
		while (started < n && started - joined < k) {
			int e = pthread_create(&th[started % k], &attr, one, (void *)started);
			if (e) {
				fprintf(stderr, "pthread_create: %s\n", strerror(e));
				return 1;
			}
			started++;
		}
		pthread_join(th[joined % k], NULL);
		joined++;
	}
	unsigned short vals[16];
	long v0 = 0, v1 = 0;
	if (syscall(SYS_semctl, id, 0, GETALL, vals) != 0) {
		perror("GETALL");
		return 1;
	}
	for (int i = 0; i < 8; i++) {
		v0 += vals[i];
		v1 += vals[8 + i];
	}
	printf("done %ld failures %ld values %ld %ld\n", n, failures, v0, v1);
	if (failures)
		printf("first error: %s\n", strerror(firsterr));
	fflush(stdout);
	waitline();
	return 0;
}
