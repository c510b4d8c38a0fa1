/* callloop: the child of the trapped-call benchmarks, in C so that it
 * costs what the floor's child (../shared/notify-floor) costs.
 *   callloop null N    N raw semget(0x5eed, 0, 0) calls
 *   callloop semop N   N semop pairs (-1 then +1) on a private semaphore
 *                      whose value is 1
 *   callloop semop N K K processes do that at once, each on its own set
 *   callloop msg N     N msgsnd/msgrcv pairs (8 bytes, IPC_NOWAIT) on a
 *                      private queue
 * Prints nanoseconds per system call (for K processes: wall time divided
 * by all their calls, so 1/throughput), after warm-up calls. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static int semloop(long n, volatile int *go)
{
	int id = syscall(SYS_semget, IPC_PRIVATE, 1, 0600);
	if (id < 0 || syscall(SYS_semctl, id, 0, SETVAL, 1) < 0) {
		perror("semget/semctl");
		return 1;
	}
	struct sembuf down = {0, -1, 0}, up = {0, 1, 0};
	for (int i = 0; i < 1000; i++) {
		syscall(SYS_semop, id, &down, 1);
		syscall(SYS_semop, id, &up, 1);
	}
	__atomic_add_fetch(go, 1, __ATOMIC_SEQ_CST);
	while (*go > 0)
		;
	for (long i = 0; i < n; i++) {
		if (syscall(SYS_semop, id, &down, 1) || syscall(SYS_semop, id, &up, 1)) {
			perror("semop");
			return 1;
		}
	}
	syscall(SYS_semctl, id, 0, IPC_RMID, 0);
	return 0;
}

static int msgloop(long n)
{
	struct {
		long mtype;
		char mtext[8];
	} m = {1, "12345678"}, r;
	int id = syscall(SYS_msgget, IPC_PRIVATE, 0600);
	if (id < 0) {
		perror("msgget");
		return 1;
	}
	double t0 = 0;
	for (long i = -1000; i < n; i++) {
		if (i == 0)
			t0 = now();
		if (syscall(SYS_msgsnd, id, &m, 8, IPC_NOWAIT) ||
		    syscall(SYS_msgrcv, id, &r, 8, 0, IPC_NOWAIT) != 8) {
			perror("msgsnd/msgrcv");
			return 1;
		}
	}
	printf("%.0f\n", (now() - t0) / (2 * n));
	syscall(SYS_msgctl, id, IPC_RMID, 0);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4)
		return 2;
	long n = atol(argv[2]);
	double t0;
	if (argc == 4) {
		/* K processes: each gets ready (warm-up done), then all start
		 * together when the parent flips the shared flag. */
		int k = atoi(argv[3]);
		volatile int *go = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		for (int i = 0; i < k; i++)
			if (fork() == 0)
				_exit(semloop(n, go));
		while (*go < k)
			usleep(100);
		t0 = now();
		*go = -1;
		int bad = 0, st;
		while (wait(&st) > 0)
			bad |= !WIFEXITED(st) || WEXITSTATUS(st);
		printf("%.0f\n", (now() - t0) / (2.0 * n * k));
		return bad;
	}
	if (!strcmp(argv[1], "null")) {
		for (int i = 0; i < 2000; i++)
			syscall(SYS_semget, 0x5eed, 0, 0);
		t0 = now();
		for (long i = 0; i < n; i++)
			syscall(SYS_semget, 0x5eed, 0, 0);
		printf("%.0f\n", (now() - t0) / n);
		return 0;
	}
	if (!strcmp(argv[1], "msg"))
		return msgloop(n);
	int id = syscall(SYS_semget, IPC_PRIVATE, 1, 0600);
	if (id < 0 || syscall(SYS_semctl, id, 0, SETVAL, 1) < 0) {
		perror("semget/semctl");
		return 1;
	}
	struct sembuf down = {0, -1, 0}, up = {0, 1, 0};
	for (int i = 0; i < 1000; i++) {
		syscall(SYS_semop, id, &down, 1);
		syscall(SYS_semop, id, &up, 1);
	}
	t0 = now();
	for (long i = 0; i < n; i++) {
		if (syscall(SYS_semop, id, &down, 1) || syscall(SYS_semop, id, &up, 1)) {
			perror("semop");
			return 1;
		}
	}
	printf("%.0f\n", (now() - t0) / (2 * n));
	syscall(SYS_semctl, id, 0, IPC_RMID, 0);
	return 0;
}
