/* racesig: sleeping System V IPC calls raced by signals, removals and
 * observers, many times at varied delays. Run natively (the oracle) and
 * under the gateway; the outputs must be identical.
 *
 * usage: racesig REPS [busy]
 *
 * For each case (call x event x delay) REPS children each block in a call
 * that cannot proceed. The parent waits until /proc shows the child asleep
 * in the call (state S, wchan the kernel's IPC wait or the seccomp
 * notifier's: the gateway may not have read the notification yet), waits
 * the case's delay (0, 3 us, 30 us, 1 ms, spinning on the clock), and then
 *   - signals it (handler, handler with SA_RESTART, SIGSTOP+SIGCONT, an
 *     ignored signal), waits until it is gone or asleep in the call again,
 *     reads the waiter counts, makes the call possible and reaps it; or
 *   - removes the object (IPC_RMID); or
 *   - reads GETNCNT/GETZCNT (the sleeper must be counted).
 * Each rep yields one line (counts after the event, the child's result,
 * final values); a case prints how many reps gave each distinct line, so
 * the output does not depend on timing unless an answer does.
 *
 * With "busy", a helper process makes non-blocking semop calls on a
 * semaphore of its own all along (bursts of 16 with 100 us pauses; with
 * "hammer", without pause), so that under the gateway the child's
 * notification often waits behind others before it is read.
 *
 * No step depends on timing: a state not reached in 10 s prints a TIMEOUT
 * line (a difference). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t handled;
static void on_sig(int s) { (void)s; handled++; }

#include "procstate.h"

static double now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

enum want { W_ASLEEP, W_STOPPED, W_SETTLED, W_GONE };
static const char *wants[] = {"asleep in the call", "stopped", "gone or asleep in the call", "gone"};
static int timeouts;

/* await waits until child p is in state w: spinning at first (to act as
 * soon as the child is asleep), then polling every 100 us. */
static void await(pid_t p, enum want w) {
	char wchan[128];
	char st = '?';
	double t0 = now_us();
	for (long i = 0;; i++) {
		if ((w == W_SETTLED || w == W_GONE) && exited(p))
			return;
		if (w != W_GONE) {
			st = taskstate(p, wchan, sizeof wchan);
			if (w == W_STOPPED ? st == 'T' : st == 'S' && in_call(wchan))
				return;
		}
		if (now_us() - t0 > 10e6)
			break;
		if (i < 2000)
			sched_yield();
		else {
			struct timespec ts = {0, 100000};
			nanosleep(&ts, NULL);
		}
	}
	printf("  TIMEOUT waiting for the child to be %s: state %c wchan %s\n", wants[w], st, wchan);
	timeouts++;
}

static void spin(int us) {
	if (us == 0)
		return;
	double t0 = now_us();
	while (now_us() - t0 < us)
		;
}

enum how { H_NORESTART, H_RESTART, H_STOPCONT, H_IGNORED, H_RMID, H_COUNT };
static const char *hows[] = {"handler", "handler+SA_RESTART", "stop+cont", "ignored", "IPC_RMID", "counted"};

enum call { C_SEMOP, C_SEMOP_ZERO, C_SEMTIMEDOP, C_MSGRCV, C_MSGSND, NCALLS };
static const char *calls[] = {"semop(-1)", "semop(wait-for-zero)", "semtimedop(-1)", "msgrcv(empty)", "msgsnd(full)"};

static const int delays[] = {0, 3, 30, 1000};
#define NDELAYS (int)(sizeof delays / sizeof delays[0])

static int semid = -1, msqid = -1;

static void install(enum how h) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sig;
	if (h == H_RESTART)
		sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	if (h == H_IGNORED)
		signal(SIGUSR1, SIG_IGN);
}

struct msg8 { long type; char text[8]; };

static void child(enum call c, enum how h, int out) {
	install(h);
	struct sembuf dec = {0, -1, 0}, zero = {1, 0, 0};
	struct msg8 m = {1, "x"};
	struct timespec to = {30, 0};
	long r;
	errno = 0;
	switch (c) {
	case C_SEMOP: r = semop(semid, &dec, 1); break;
	case C_SEMTIMEDOP: r = semtimedop(semid, &dec, 1, &to); break;
	case C_SEMOP_ZERO: r = semop(semid, &zero, 1); break;
	case C_MSGRCV: r = msgrcv(msqid, &m, sizeof m.text, 1, 0); break;
	default: r = msgsnd(msqid, &m, 8, 0); break;
	}
	dprintf(out, "child ret=%ld errno=%s handled=%d", r, r < 0 ? strerrorname_np(errno) : "0", handled);
	_exit(0);
}

/* setup makes the objects (anew after an IPC_RMID) and the state in
 * which call c blocks. */
static void setup(enum call c) {
	if (semid < 0)
		semid = semget(IPC_PRIVATE, 3, 0600);
	if (msqid < 0)
		msqid = msgget(IPC_PRIVATE, 0600);
	if (semid < 0 || msqid < 0) {
		perror("get");
		exit(1);
	}
	unsigned short init[3] = {0, 1, 0};
	union { int val; unsigned short *arr; } u;
	u.arr = init;
	semctl(semid, 0, SETALL, u);
	struct msg8 m;
	while (msgrcv(msqid, &m, 8, 0, IPC_NOWAIT) >= 0)
		;
	struct msqid_ds ds;
	msgctl(msqid, IPC_STAT, &ds);
	ds.msg_qbytes = 8;
	msgctl(msqid, IPC_SET, &ds);
	if (c == C_MSGSND) {
		struct msg8 f = {2, "fill"};
		msgsnd(msqid, &f, 8, 0);
	}
}

static int is_sem(enum call c) { return c <= C_SEMTIMEDOP; }

static void counts(enum call c, char *buf, size_t n) {
	if (is_sem(c))
		snprintf(buf, n, "ncnt=%d zcnt=%d", semctl(semid, 0, GETNCNT), semctl(semid, 1, GETZCNT));
	else {
		struct msqid_ds ds;
		msgctl(msqid, IPC_STAT, &ds);
		snprintf(buf, n, "qnum=%lu", (unsigned long)ds.msg_qnum);
	}
}

/* rep runs one rep of a case and writes its line to line. */
static void rep(enum call c, enum how h, int delay, char *line, size_t n) {
	setup(c);
	int res[2];
	if (pipe(res) < 0) { perror("pipe"); exit(1); }
	pid_t p = fork();
	if (p == 0) {
		close(res[0]);
		child(c, h, res[1]);
	}
	close(res[1]);
	await(p, W_ASLEEP);
	spin(delay);
	char after[64] = "", fin[64] = "";
	switch (h) {
	case H_STOPCONT:
		kill(p, SIGSTOP);
		await(p, W_STOPPED);
		kill(p, SIGCONT);
		break;
	case H_RMID:
		if (is_sem(c))
			semctl(semid, 0, IPC_RMID), semid = -1;
		else
			msgctl(msqid, IPC_RMID, NULL), msqid = -1;
		await(p, W_GONE);
		break;
	case H_COUNT:
		counts(c, after, sizeof after);
		break;
	default:
		kill(p, SIGUSR1);
	}
	if (h != H_RMID && h != H_COUNT) {
		await(p, W_SETTLED);
		counts(c, after, sizeof after);
	}
	if (h != H_RMID) {
		/* make the call possible */
		struct sembuf inc = {0, 1, 0}, clr = {1, -1, 0};
		struct msg8 m = {1, "y"};
		switch (c) {
		case C_SEMOP: case C_SEMTIMEDOP: semop(semid, &inc, 1); break;
		case C_SEMOP_ZERO: semop(semid, &clr, 1); break;
		case C_MSGRCV: msgsnd(msqid, &m, 8, 0); break;
		default: msgrcv(msqid, &m, 8, 2, 0); break;
		}
	}
	int st = 0;
	await(p, W_GONE);
	waitpid(p, &st, 0);
	char cl[128];
	ssize_t r = read(res[0], cl, sizeof cl - 1);
	close(res[0]);
	cl[r > 0 ? r : 0] = 0;
	if (r <= 0)
		snprintf(cl, sizeof cl, "child printed nothing (status %#x)", st);
	if (h != H_RMID) {
		if (is_sem(c))
			snprintf(fin, sizeof fin, "sem0=%d sem1=%d", semctl(semid, 0, GETVAL), semctl(semid, 1, GETVAL));
		else
			counts(c, fin, sizeof fin);
	}
	snprintf(line, n, "after: %s | %s | final: %s", after, cl, fin);
}

#define MAXLINES 8
struct hist { char line[MAXLINES][256]; int n[MAXLINES]; int k; };

static void add(struct hist *hs, const char *line) {
	for (int i = 0; i < hs->k; i++)
		if (strcmp(hs->line[i], line) == 0) {
			hs->n[i]++;
			return;
		}
	if (hs->k < MAXLINES) {
		snprintf(hs->line[hs->k], sizeof hs->line[0], "%s", line);
		hs->n[hs->k++] = 1;
	}
}

static int cmpline(const void *a, const void *b) { return strcmp(a, b); }

/* busy makes non-blocking calls on a semaphore of its own: in bursts of
 * 16 with 100 us pauses, or without pause (hammer). */
static void busy(int hammer) {
	int id = semid;
	struct sembuf ops[2] = {{2, 1, 0}, {2, -1, IPC_NOWAIT}};
	for (;;) {
		if (getppid() == 1)
			_exit(0);
		for (int i = 0; i < 8; i++) {
			semop(id, &ops[0], 1);
			semop(id, &ops[1], 1);
		}
		if (!hammer) {
			struct timespec ts = {0, 100000};
			nanosleep(&ts, NULL);
		}
	}
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	int reps = argc > 1 ? atoi(argv[1]) : 50;
	int hammer = argc > 2 && strcmp(argv[2], "hammer") == 0;
	int withbusy = hammer || (argc > 2 && strcmp(argv[2], "busy") == 0);
	pid_t helper = -1;
	int busysem = -1;
	if (withbusy) {
		/* a semaphore set of its own, never removed by a case */
		busysem = semget(IPC_PRIVATE, 3, 0600);
		int keep = semid;
		semid = busysem;
		helper = fork();
		if (helper == 0)
			busy(hammer);
		semid = keep;
	}
	for (int c = 0; c < NCALLS; c++)
		for (int h = H_NORESTART; h <= H_COUNT; h++) {
			if (h == H_COUNT && !is_sem(c))
				continue; /* Linux reports no msg waiter counts */
			for (int d = 0; d < NDELAYS; d++) {
				struct hist hs;
				memset(&hs, 0, sizeof hs);
				for (int i = 0; i < reps && timeouts < 3; i++) {
					char line[256];
					rep(c, h, delays[d], line, sizeof line);
					add(&hs, line);
				}
				printf("%s, %s, delay %dus:\n", calls[c], hows[h], delays[d]);
				/* sort lines so that their order does not depend on which came first */
				struct { char line[256]; int n; } out[MAXLINES];
				for (int i = 0; i < hs.k; i++) {
					snprintf(out[i].line, sizeof out[i].line, "%s", hs.line[i]);
					out[i].n = hs.n[i];
				}
				qsort(out, hs.k, sizeof out[0], cmpline);
				for (int i = 0; i < hs.k; i++)
					printf("  %d x %s\n", out[i].n, out[i].line);
				if (timeouts >= 3) {
					printf("giving up after 3 timeouts\n");
					goto end;
				}
			}
		}
end:
	if (helper > 0) {
		kill(helper, SIGKILL);
		waitpid(helper, NULL, 0);
		semctl(busysem, 0, IPC_RMID);
	}
	if (semid >= 0)
		semctl(semid, 0, IPC_RMID);
	if (msqid >= 0)
		msgctl(msqid, IPC_RMID, NULL);
	return 0;
}
