/* exitcause: an exit is observed only after its SEM_UNDO took effect and
 * the process left every wait queue. REPS times each: a child takes 2
 * units of semaphore 0 with SEM_UNDO, then sleeps in semop on semaphore
 * 1 (-1), and is killed with SIGKILL, or exits by itself (normal). The
 * parent observes the exit by waitpid, or by EOF on a pipe the child
 * held, and at once reads GETVAL(0) (must be 5 again) and GETNCNT(1)
 * (must be 0). Two more cases need no call after the exit: the parent
 * sleeps in semop for the 5 units, and the child, once it sees the parent
 * asleep (GETNCNT of 0 is 1), kills itself or exits; its SEM_UNDO must
 * wake the parent (semtimedop, 10 s). Prints per case how many reps gave
 * each reading.
 * usage: exitcause REPS */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int semid;

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	int reps = argc > 1 ? atoi(argv[1]) : 200;
	semid = semget(IPC_PRIVATE, 2, 0600);
	static const char *cases[] = {"SIGKILL, seen by waitpid", "SIGKILL, seen by pipe EOF",
		"normal exit, seen by waitpid", "normal exit, seen by pipe EOF",
		"SIGKILL, wakes a sleeper", "normal exit, wakes a sleeper"};
	for (int c = 0; c < 6; c++) {
		int wake = c >= 4, kill9 = c < 2 || c == 4, bypipe = c % 2 && !wake;
		long good = 0, bad = 0;
		char first[128] = "";
		for (int i = 0; i < reps; i++) {
			semctl(semid, 0, SETVAL, 5);
			semctl(semid, 1, SETVAL, 0);
			int ready[2], eof[2];
			if (pipe(ready) < 0 || pipe(eof) < 0) { perror("pipe"); return 1; }
			pid_t p = fork();
			if (p == 0) {
				close(ready[0]);
				close(eof[0]);
				struct sembuf take = {0, -2, SEM_UNDO}, wait1 = {1, -1, 0};
				if (semop(semid, &take, 1) < 0) _exit(3);
				write(ready[1], "r", 1);
				if (wake) {
					/* wait until the parent sleeps for the units */
					while (semctl(semid, 0, GETNCNT) != 1)
						sched_yield();
					if (kill9)
						raise(SIGKILL);
					_exit(0);
				}
				if (kill9)
					semop(semid, &wait1, 1); /* killed asleep */
				_exit(0);
			}
			close(ready[1]);
			close(eof[1]);
			char ch;
			if (read(ready[0], &ch, 1) != 1) { printf("child failed\n"); return 1; }
			if (wake) {
				struct sembuf all = {0, -5, 0};
				struct timespec ts = {10, 0};
				int r = semtimedop(semid, &all, 1, &ts), e = errno;
				int v = semctl(semid, 0, GETVAL), n = semctl(semid, 0, GETNCNT), st;
				waitpid(p, &st, 0);
				close(ready[0]);
				close(eof[0]);
				if (r == 0 && v == 0 && n == 0)
					good++;
				else if (bad++ == 0)
					snprintf(first, sizeof first, "semop %d (%s) val=%d ncnt=%d at rep %d", r,
						 r ? strerror(e) : "ok", v, n, i);
				continue;
			}
			if (kill9) {
				/* wait until it is asleep: GETNCNT is 1 */
				while (semctl(semid, 1, GETNCNT) != 1)
					sched_yield();
				kill(p, SIGKILL);
			}
			int st;
			if (bypipe) {
				while (read(eof[0], &ch, 1) > 0)
					;
			} else
				waitpid(p, &st, 0);
			int v = semctl(semid, 0, GETVAL), n = semctl(semid, 1, GETNCNT);
			if (bypipe)
				waitpid(p, &st, 0);
			close(ready[0]);
			close(eof[0]);
			if (v == 5 && n == 0)
				good++;
			else if (bad++ == 0)
				snprintf(first, sizeof first, "val=%d ncnt=%d at rep %d", v, n, i);
		}
		printf("%s: %ld x %s", cases[c], good, wake ? "woken, val=0 ncnt=0" : "val=5 ncnt=0");
		if (bad)
			printf(", %ld x otherwise (first: %s)", bad, first);
		printf("\n");
	}
	semctl(semid, 0, IPC_RMID);
	return 0;
}
