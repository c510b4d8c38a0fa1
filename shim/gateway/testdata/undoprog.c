/* undoprog: takes SEM_UNDO units in two IPC namespaces (its own, then a
 * fresh one from unshare), prints "ready" and waits to be killed; or,
 * with "observe", prints the values of key 0x55 in its namespace. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <unistd.h>

static int take(int val, int n) {
	int id = semget(0x55, 1, IPC_CREAT | 0600);
	if (id < 0) { perror("semget"); return -1; }
	semctl(id, 0, SETVAL, val);
	struct sembuf op = {0, -n, SEM_UNDO};
	if (semop(id, &op, 1) < 0) { perror("semop"); return -1; }
	return semctl(id, 0, GETVAL);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	int a = take(5, 2);
	if (argc > 1 && strcmp(argv[1], "one") == 0) {
		printf("ready %d\n", a);
	} else {
		if (unshare(CLONE_NEWIPC) < 0) { perror("unshare"); return 1; }
		int b = take(5, 3);
		printf("ready %d %d\n", a, b);
	}
	for (;;) pause();
}
