/* torture: workers take and release a SEM_UNDO mutex while the parent
 * sends them signals with and without SA_RESTART, stops and continues
 * them, and kills and replaces them. At the end it prints invariants that
 * must hold both natively and under the gateway:
 *   violations=0 (never two workers inside), final semaphore value 1,
 *   no lock timeouts (a lost unit would starve everyone),
 * and counters that vary between runs (ops, EINTRs, kills).
 *
 * usage: torture WORKERS MILLISECONDS SEED */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXW 64
struct shared {
	volatile int stop;
	volatile int inside;
	volatile pid_t holder;
	volatile long total;
	volatile long violations;
	volatile long timeouts;
	volatile long eintr_lock, eintr_unlock, eintr_other;
	volatile long ops[MAXW];
	volatile pid_t killed[4096];
	volatile int nkilled;
};
static struct shared *sh;
static int semid;

static void on_sig(int s) { (void)s; }

static int was_killed(pid_t p) {
	for (int i = 0; i < sh->nkilled && i < 4096; i++)
		if (sh->killed[i] == p)
			return 1;
	return 0;
}

static void worker(int w) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sig;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_flags = 0;
	sigaction(SIGUSR2, &sa, NULL);
	/* Distinct sembuf addresses for lock and unlock: consecutive calls
	 * of one thread never have identical arguments, so the gateway can
	 * count restarts exactly. */
	struct sembuf lock = {0, -1, SEM_UNDO}, unlock = {0, 1, SEM_UNDO};
	struct timespec to = {2, 0};
	pid_t me = getpid();
	while (!sh->stop) {
		int r;
		while ((r = semtimedop(semid, &lock, 1, &to)) < 0 && errno == EINTR)
			__sync_fetch_and_add(&sh->eintr_lock, 1);
		if (r < 0) {
			if (errno == EAGAIN)
				__sync_fetch_and_add(&sh->timeouts, 1);
			else
				__sync_fetch_and_add(&sh->eintr_other, 1);
			continue;
		}
		if (sh->inside && !was_killed(sh->holder))
			__sync_fetch_and_add(&sh->violations, 1);
		sh->inside = 1;
		sh->holder = me;
		sh->total++;
		sh->ops[w]++;
		sh->inside = 0;
		while ((r = semop(semid, &unlock, 1)) < 0 && errno == EINTR)
			__sync_fetch_and_add(&sh->eintr_unlock, 1);
		if (r < 0)
			__sync_fetch_and_add(&sh->eintr_other, 1);
	}
	_exit(0);
}

static pid_t spawn(int w) {
	pid_t p = fork();
	if (p == 0)
		worker(w);
	return p;
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n = argc > 1 ? atoi(argv[1]) : 6, ms = argc > 2 ? atoi(argv[2]) : 2000;
	srand(argc > 3 ? atoi(argv[3]) : 1);
	if (n > MAXW) n = MAXW;
	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	semid = semget(IPC_PRIVATE, 1, 0600);
	semctl(semid, 0, SETVAL, 1);
	pid_t pids[MAXW];
	for (int w = 0; w < n; w++)
		pids[w] = spawn(w);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long sigs[5] = {0};
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= ms)
			break;
		usleep(200 + rand() % 300);
		int w = rand() % n, k = rand() % 100;
		if (k < 40) { kill(pids[w], SIGUSR1); sigs[0]++; }
		else if (k < 80) { kill(pids[w], SIGUSR2); sigs[1]++; }
		else if (k < 97) { kill(pids[w], SIGSTOP); usleep(rand() % 500); kill(pids[w], SIGCONT); sigs[2]++; }
		else if (sh->nkilled < 4096) {
			sh->killed[sh->nkilled++] = pids[w];
			__sync_synchronize();
			kill(pids[w], SIGKILL);
			waitpid(pids[w], NULL, 0);
			pids[w] = spawn(w);
			sigs[3]++;
		}
	}
	sh->stop = 1;
	for (int w = 0; w < n; w++)
		waitpid(pids[w], NULL, 0);
	int val = semctl(semid, 0, GETVAL);
	long sum = 0;
	for (int w = 0; w < n; w++)
		sum += sh->ops[w];
	printf("invariants: violations=%ld final=%d timeouts=%ld other_errors=%ld\n",
	       sh->violations, val, sh->timeouts, sh->eintr_other);
	(void)sum;
	printf("counts: ops=%ld eintr_lock=%ld eintr_unlock=%ld sigusr1=%ld sigusr2=%ld stopcont=%ld kills=%ld\n",
	       sh->total, sh->eintr_lock, sh->eintr_unlock, sigs[0], sigs[1], sigs[2], sigs[3]);
	semctl(semid, 0, IPC_RMID);
	return 0;
}
