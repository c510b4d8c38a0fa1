/* sleepers N sem|msg SECONDS: N processes sleep in semop(-1) on a private
 * semaphore of value 0 (or in msgrcv on an empty private queue); once all
 * are asleep (GETNCNT for sem; every child in state S, then an IPC_SET
 * for msg) the parent
 * waits SECONDS, removes the object (the sleepers fail with EIDRM and
 * exit), reaps them and prints "ok". The idle-waiter benchmark's child. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

static void nap(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&t, 0);
}

static int asleep(pid_t pid)
{
	char p[64], b[512];
	snprintf(p, sizeof p, "/proc/%d/stat", pid);
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return 0;
	int n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n <= 0)
		return 0;
	b[n] = 0;
	char *s = strrchr(b, ')');
	return s && s[2] == 'S';
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int n = atoi(argv[1]), msg = !strcmp(argv[2], "msg"), secs = atoi(argv[3]);
	int id = msg ? msgget(IPC_PRIVATE, 0600) : semget(IPC_PRIVATE, 1, 0600);
	if (id < 0) {
		perror("get");
		return 1;
	}
	pid_t *kids = calloc(n ? n : 1, sizeof *kids);
	for (int i = 0; i < n; i++) {
		kids[i] = fork();
		if (kids[i] < 0) {
			perror("fork");
			return 1;
		}
		if (kids[i] == 0) {
			int r;
			if (msg) {
				struct { long t; char b[8]; } m;
				r = syscall(SYS_msgrcv, id, &m, sizeof m.b, 0, 0);
			} else {
				struct sembuf down = {0, -1, 0};
				r = syscall(SYS_semop, id, &down, 1);
			}
			_exit(r == -1 && errno == EIDRM ? 0 : 1);
		}
	}
	for (;;) {
		int ready = 0;
		if (msg) {
			for (int i = 0; i < n; i++)
				ready += asleep(kids[i]);
		} else {
			ready = semctl(id, 0, GETNCNT);
		}
		if (ready >= n)
			break;
		nap(10);
	}
	if (msg) {
		/* Asleep in the trap is not yet asleep in the engine: an
		 * IPC_SET (a no-op here) is served only once every call trapped
		 * before it was. */
		struct msqid_ds ds;
		if (msgctl(id, IPC_STAT, &ds) < 0 || msgctl(id, IPC_SET, &ds) < 0) {
			perror("msgctl");
			return 1;
		}
	}
	sleep(secs);
	if ((msg ? msgctl(id, IPC_RMID, 0) : semctl(id, 0, IPC_RMID)) < 0) {
		perror("rmid");
		return 1;
	}
	int bad = 0, st;
	while (wait(&st) > 0)
		bad += !WIFEXITED(st) || WEXITSTATUS(st);
	if (bad) {
		fprintf(stderr, "%d sleepers did not end with EIDRM\n", bad);
		return 1;
	}
	puts("ok");
	return 0;
}
