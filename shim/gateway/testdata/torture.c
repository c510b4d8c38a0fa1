/* torture: workers take and release a SEM_UNDO mutex while the parent
 * sends them signals with and without SA_RESTART, stops and continues
 * them, and kills and replaces them. At the end it prints invariants that
 * must hold both natively and under the gateway:
 *   violations=0 (never two workers inside), final semaphore value 1,
 *   no lock timeouts (a lost unit would starve everyone),
 * and counters that vary between runs (ops, EINTRs, kills).
 *
 * With a fourth argument "msg" the workers instead pass numbered messages
 * through a small queue (half send, half receive, each retrying on
 * EINTR), and the invariants are: no message received twice, and no more
 * messages lost than workers killed (a killed worker can lose the one it
 * was handling).
 *
 * usage: torture WORKERS MILLISECONDS SEED [msg] */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
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
	/* msg mode */
	volatile long next, eintr_snd, eintr_rcv;
	volatile unsigned char sent[1 << 20], received[1 << 20];
};
#define MAXSEQ (1 << 20)
static int msqid, msgmode;
struct seqmsg { long type; long seq; };
static struct shared *sh;
static int semid;

static void on_sig(int s) { (void)s; }

static int was_killed(pid_t p) {
	for (int i = 0; i < sh->nkilled && i < 4096; i++)
		if (sh->killed[i] == p)
			return 1;
	return 0;
}

static void msg_worker(int w) {
	/* Two buffers used in turn: consecutive calls of one thread never
	 * have identical arguments, so the gateway counts restarts exactly. */
	struct seqmsg m[2];
	int b = 0;
	while (!sh->stop) {
		long r;
		b ^= 1;
		if (w % 2 == 0) {
			long seq = __sync_fetch_and_add(&sh->next, 1);
			if (seq >= MAXSEQ)
				break;
			m[b].type = 1 + seq % 3;
			m[b].seq = seq;
			sh->sent[seq] = 1;
			while ((r = msgsnd(msqid, &m[b], sizeof(long), 0)) < 0 && errno == EINTR && !sh->stop)
				__sync_fetch_and_add(&sh->eintr_snd, 1);
			if (r < 0 && errno != EINTR)
				__sync_fetch_and_add(&sh->eintr_other, 1);
			if (r < 0)
				sh->sent[seq] = 0; /* not sent (stopping) */
			if (r == 0)
				sh->ops[w]++;
		} else {
			while ((r = msgrcv(msqid, &m[b], sizeof(long), 0, 0)) < 0 && errno == EINTR && !sh->stop)
				__sync_fetch_and_add(&sh->eintr_rcv, 1);
			if (r == sizeof(long)) {
				__sync_fetch_and_add(&sh->received[m[b].seq], 1);
				sh->ops[w]++;
			} else if (r >= 0 || errno != EINTR)
				__sync_fetch_and_add(&sh->eintr_other, 1);
		}
	}
	_exit(0);
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
	if (msgmode)
		msg_worker(w);
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
	msgmode = argc > 4 && strcmp(argv[4], "msg") == 0;
	semid = semget(IPC_PRIVATE, 1, 0600);
	semctl(semid, 0, SETVAL, 1);
	if (msgmode) {
		struct msqid_ds ds;
		msqid = msgget(IPC_PRIVATE, 0600);
		msgctl(msqid, IPC_STAT, &ds);
		ds.msg_qbytes = 8 * sizeof(long);
		msgctl(msqid, IPC_SET, &ds);
	}
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
	if (msgmode) {
		/* Sleepers see stop on their next EINTR. */
		for (int w = 0; w < n; w++) {
			while (waitpid(pids[w], NULL, WNOHANG) == 0) {
				kill(pids[w], SIGUSR2);
				usleep(1000);
			}
		}
		struct seqmsg m;
		while (msgrcv(msqid, &m, sizeof(long), 0, IPC_NOWAIT) == sizeof(long))
			sh->received[m.seq]++;
		long dups = 0, lost = 0, n_sent = 0, n_rcvd = 0;
		for (long i = 0; i < sh->next && i < MAXSEQ; i++) {
			n_sent += sh->sent[i];
			n_rcvd += sh->received[i] > 0;
			dups += sh->received[i] > 1;
			lost += sh->sent[i] && !sh->received[i];
		}
		printf("invariants: duplicated=%ld lost<=kills=%d other_errors=%ld\n", dups, lost <= sigs[3], sh->eintr_other);
		printf("counts: sent=%ld received=%ld lost=%ld eintr_snd=%ld eintr_rcv=%ld sigusr1=%ld sigusr2=%ld stopcont=%ld kills=%ld\n",
		       n_sent, n_rcvd, lost, sh->eintr_snd, sh->eintr_rcv, sigs[0], sigs[1], sigs[2], sigs[3]);
		msgctl(msqid, IPC_RMID, NULL);
		semctl(semid, 0, IPC_RMID);
		return 0;
	}
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
