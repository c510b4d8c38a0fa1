/* threadgone: a thread whose first trapped call is interrupted by a
 * signal whose handler ends the thread (SYS_exit), while its process
 * lives on. Under the gateway the test holds the call between the
 * thread's identification and its publication, ends the thread there and
 * has its exit applied: the gateway must not keep a record of the dead
 * thread (it would name a reused tid with the old thread's identity and
 * hold its pidfd until its process exits).
 *
 * usage: threadgone
 * Prints the main thread's semop result after joining the thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <unistd.h>

static int semid;

static void end_thread(int sig) {
	(void)sig;
	syscall(SYS_exit, 0); /* this thread only */
}

static void *first_call(void *a) {
	(void)a;
	struct sembuf op = {0, 1, 0};
	semop(semid, &op, 1);
	return NULL;
}

int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = end_thread;
	sigaction(SIGUSR1, &sa, NULL);
	semid = semget(IPC_PRIVATE, 1, 0600);
	if (semid < 0) {
		printf("semget: %s\n", strerror(errno));
		return 1;
	}
	pthread_t th;
	pthread_create(&th, NULL, first_call, NULL);
	pthread_join(th, NULL);
	struct sembuf op = {0, 1, IPC_NOWAIT};
	printf("main semop: %d\n", semop(semid, &op, 1));
	semctl(semid, 0, IPC_RMID);
	return 0;
}
