/* freezer: work for TestFreezeConservation and TestFreezeReplies, made
 * while the test freezes and thaws the program's cgroup (cgroup v1
 * freezer) again and again.
 *
 * usage: freezer CGROUP_DIR SHARED_FILE MODE
 *
 * The program first joins CGROUP_DIR (writes its pid to cgroup.procs);
 * the processes it forks are frozen with it. SHARED_FILE (4096 bytes) is
 * mapped shared: the program counts its progress there (the test waits
 * for work to be done between freezes) and the test sets its stop flag
 * there once it has frozen enough times.
 *
 * MODE conserve: 4 workers move units between 4 semaphores of 2 units
 * each (semtimedop -1 on one, +1 on the next; EINTR and EAGAIN retried),
 * 2 producers send numbered messages through a small queue (so senders
 * sleep) and 2 consumers receive them (so receivers sleep). After the
 * stop: the semaphores must still hold 8 units and every message number
 * sent must have been received exactly once. Prints
 *   "sem: total T (want 8)" and
 *   "msg: sent S, received R, lost L, duplicated D".
 *
 * MODE sem / msg: 3 processes loop semget(IPC_PRIVATE), SETVAL,
 * IPC_RMID (sem) or msgget(IPC_PRIVATE), IPC_SET, IPC_RMID (msg). None
 * of these calls fails natively, and nothing is left at the end. Prints
 * "MODE: created C, removed R, left N, failures: ..." by call and errno.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

/* The shared file: the test reads progress and writes stop. */
struct ctl {
	volatile long progress; /* offset 0: calls made, all processes */
	volatile long stop;     /* offset 8: set by the test */
};

#define MAXSEQ (1 << 20)
#define NSEMS 4
#define UNITS 2
#define SEMW 4
#define PRODUCERS 2
#define CONSUMERS 2
#define PROCS 3

/* Shared between the program's processes (anonymous, MAP_SHARED). */
struct shared {
	volatile long sent[PRODUCERS];
	volatile long stuck;
	/* per process, per call, per errno (< 200) */
	volatile long fails[PROCS][3][200];
	volatile long created[PROCS], removed[PROCS];
	volatile unsigned char received[MAXSEQ];
};

static struct ctl *ctl;
static struct shared *sh;
static int semid, msqid;

struct seqmsg {
	long type;
	long seq;
};

static void progress(void) { __sync_fetch_and_add(&ctl->progress, 1); }

static int stopping(void) { return ctl->stop != 0; }

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int semstep(int num, int op, int timed) {
	struct sembuf sb = {.sem_num = num, .sem_op = op, .sem_flg = 0};
	struct timespec ts = {0, 200 * 1000 * 1000};
	for (;;) {
		int r = timed ? semtimedop(semid, &sb, 1, &ts) : semop(semid, &sb, 1);
		if (r == 0)
			return 0;
		if (errno == EINTR)
			continue; /* natively too: the freezer ends a sleep with EINTR */
		if (errno == EAGAIN && stopping())
			return -1;
		if (errno == EAGAIN)
			continue;
		perror("semop");
		exit(3);
	}
}

static void semworker(int w) {
	for (long k = 0; !stopping(); k++) {
		int i = (int)((k * 3 + w) % NSEMS), j = (i + 1) % NSEMS;
		if (semstep(i, -1, 1) < 0)
			break;
		progress();
		semstep(j, +1, 0);
		progress();
	}
	_exit(0);
}

static void producer(int p) {
	long n = 0;
	while (!stopping() && n < MAXSEQ / PRODUCERS) {
		struct seqmsg m = {.type = 1, .seq = p * (MAXSEQ / PRODUCERS) + n};
		if (msgsnd(msqid, &m, sizeof m.seq, 0) < 0) {
			if (errno == EINTR)
				continue;
			perror("msgsnd");
			exit(3);
		}
		n++;
		sh->sent[p] = n;
		progress();
	}
	_exit(0);
}

static void consumer(void) {
	for (;;) {
		struct seqmsg m;
		ssize_t r = msgrcv(msqid, &m, sizeof m.seq, 0, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			perror("msgrcv");
			exit(3);
		}
		if (m.type == 2)
			_exit(0); /* the end */
		if (m.seq >= 0 && m.seq < MAXSEQ && sh->received[m.seq] < 255)
			__sync_fetch_and_add(&sh->received[m.seq], 1);
		progress();
	}
}

static void conserve(void) {
	semid = semget(IPC_PRIVATE, NSEMS, 0600);
	msqid = msgget(IPC_PRIVATE, 0600);
	if (semid < 0 || msqid < 0) {
		perror("get");
		exit(2);
	}
	for (int i = 0; i < NSEMS; i++)
		if (semctl(semid, i, SETVAL, UNITS) < 0) {
			perror("SETVAL");
			exit(2);
		}
	struct msqid_ds ds;
	if (msgctl(msqid, IPC_STAT, &ds) < 0) {
		perror("IPC_STAT");
		exit(2);
	}
	ds.msg_qbytes = 4 * sizeof(long); /* 4 messages: senders sleep */
	if (msgctl(msqid, IPC_SET, &ds) < 0) {
		perror("IPC_SET");
		exit(2);
	}
	pid_t sems[SEMW], prods[PRODUCERS], cons[CONSUMERS];
	for (int w = 0; w < SEMW; w++)
		if ((sems[w] = fork()) == 0)
			semworker(w);
	for (int p = 0; p < PRODUCERS; p++)
		if ((prods[p] = fork()) == 0)
			producer(p);
	for (int c = 0; c < CONSUMERS; c++)
		if ((cons[c] = fork()) == 0)
			consumer();
	for (int w = 0; w < SEMW; w++)
		waitpid(sems[w], NULL, 0);
	for (int p = 0; p < PRODUCERS; p++)
		waitpid(prods[p], NULL, 0);
	/* After every data message (FIFO): one end message per consumer, and
	 * more if one was lost, for a bounded time. */
	int left = CONSUMERS;
	double deadline = now() + 60;
	for (int c = 0; c < CONSUMERS; c++) {
		struct seqmsg m = {.type = 2, .seq = -1};
		while (msgsnd(msqid, &m, sizeof m.seq, 0) < 0 && errno == EINTR)
			;
	}
	while (left > 0 && now() < deadline) {
		pid_t p = waitpid(-1, NULL, WNOHANG);
		if (p > 0) {
			left--;
			continue;
		}
		usleep(10000);
	}
	for (int c = 0; c < CONSUMERS; c++)
		kill(cons[c], SIGKILL);
	while (waitpid(-1, NULL, 0) > 0)
		;
	long total = 0;
	for (int i = 0; i < NSEMS; i++)
		total += semctl(semid, i, GETVAL);
	printf("sem: total %ld (want %d)\n", total, NSEMS * UNITS);
	long sent = 0, received = 0, lost = 0, dup = 0;
	for (int p = 0; p < PRODUCERS; p++) {
		sent += sh->sent[p];
		for (long n = 0; n < sh->sent[p]; n++) {
			unsigned char c = sh->received[p * (MAXSEQ / PRODUCERS) + n];
			if (c == 0)
				lost++;
			else if (c > 1)
				dup += c - 1;
		}
	}
	for (long s = 0; s < MAXSEQ; s++)
		received += sh->received[s];
	printf("msg: sent %ld, received %ld, lost %ld, duplicated %ld%s\n", sent, received, lost, dup,
	       left ? " (consumers hung)" : "");
	semctl(semid, 0, IPC_RMID);
	msgctl(msqid, IPC_RMID, NULL);
}

static const char *callname[2][3] = {{"semget", "SETVAL", "IPC_RMID"}, {"msgget", "IPC_SET", "IPC_RMID"}};

static void fail(int p, int call) {
	sh->fails[p][call][errno < 200 ? errno : 0]++;
}

static void replier(int p, int msg) {
	while (!stopping()) {
		int id = msg ? msgget(IPC_PRIVATE, 0600) : semget(IPC_PRIVATE, 1, 0600);
		progress();
		if (id < 0) {
			fail(p, 0);
			continue;
		}
		sh->created[p]++;
		if (msg) {
			struct msqid_ds ds;
			memset(&ds, 0, sizeof ds);
			ds.msg_perm.uid = getuid();
			ds.msg_perm.gid = getgid();
			ds.msg_perm.mode = 0640;
			ds.msg_qbytes = 8192;
			if (msgctl(id, IPC_SET, &ds) < 0)
				fail(p, 1);
			if (msgctl(id, IPC_RMID, NULL) < 0)
				fail(p, 2);
			else
				sh->removed[p]++;
		} else {
			if (semctl(id, 0, SETVAL, 5) < 0)
				fail(p, 1);
			if (semctl(id, 0, IPC_RMID) < 0)
				fail(p, 2);
			else
				sh->removed[p]++;
		}
		progress();
	}
	_exit(0);
}

static void replies(int msg) {
	pid_t ps[PROCS];
	for (int p = 0; p < PROCS; p++)
		if ((ps[p] = fork()) == 0)
			replier(p, msg);
	for (int p = 0; p < PROCS; p++)
		waitpid(ps[p], NULL, 0);
	struct seminfo si;
	struct msginfo mi;
	int left = msg ? (msgctl(0, MSG_INFO, (struct msqid_ds *)&mi) >= 0 ? mi.msgpool : -1)
		       : (semctl(0, 0, SEM_INFO, (void *)&si) >= 0 ? si.semusz : -1);
	long created = 0, removed = 0;
	for (int p = 0; p < PROCS; p++) {
		created += sh->created[p];
		removed += sh->removed[p];
	}
	printf("%s: created %ld, removed %ld, left %d, failures:", msg ? "msg" : "sem", created, removed, left);
	int any = 0;
	for (int c = 0; c < 3; c++)
		for (int e = 0; e < 200; e++) {
			long n = 0;
			for (int p = 0; p < PROCS; p++)
				n += sh->fails[p][c][e];
			if (n) {
				printf(" %s %s x%ld", callname[msg][c], strerror(e), n);
				any = 1;
			}
		}
	printf("%s\n", any ? "" : " none");
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 4) {
		fprintf(stderr, "usage: freezer CGROUP_DIR SHARED_FILE conserve|sem|msg\n");
		return 2;
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/cgroup.procs", argv[1]);
	int fd = open(path, O_WRONLY);
	if (fd < 0 || dprintf(fd, "%d\n", getpid()) < 0) {
		perror(path);
		return 2;
	}
	close(fd);
	fd = open(argv[2], O_RDWR);
	if (fd < 0) {
		perror(argv[2]);
		return 2;
	}
	ctl = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ctl == MAP_FAILED || sh == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	if (strcmp(argv[3], "conserve") == 0)
		conserve();
	else if (strcmp(argv[3], "sem") == 0)
		replies(0);
	else if (strcmp(argv[3], "msg") == 0)
		replies(1);
	else
		return 2;
	return 0;
}
