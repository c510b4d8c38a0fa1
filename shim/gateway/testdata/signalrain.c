/* signalrain: a child makes calls that never sleep (semget, semctl SETVAL
 * and IPC_RMID; msgget, msgctl IPC_SET and IPC_RMID; semget with
 * IPC_CREAT|IPC_EXCL) while its parent sends it SIGUSR1, whose handler
 * has SA_RESTART, as fast as it can. Natively none of these calls is
 * interrupted: every one succeeds once and nothing is left. Under the
 * gateway a signal can end the trapped call after its effect was done
 * (the set removed, created): the kernel restarts it, and the restart
 * must get the call's answer, not run it again (an IPC_RMID failing
 * with EINVAL, an IPC_CREAT|IPC_EXCL with EEXIST, a second set made).
 * Prints, per part, the failures by errno and the objects left. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long handled;
static void on_sig(int s) { (void)s; handled++; }

/* fails counts failures by errno (errno < 200). */
static int fails[200];

static void check(long r, const char *what) {
	(void)what;
	if (r < 0)
		fails[errno < 200 ? errno : 0]++;
}

static void report(const char *part) {
	struct seminfo si;
	struct msginfo mi;
	int sets = semctl(0, 0, SEM_INFO, (void *)&si) >= 0 ? si.semusz : -1;
	int queues = msgctl(0, MSG_INFO, (struct msqid_ds *)&mi) >= 0 ? mi.msgpool : -1;
	printf("%s: sets left %d, queues left %d, failures:", part, sets, queues);
	int any = 0;
	for (int e = 0; e < 200; e++)
		if (fails[e]) {
			printf(" %s x%d", strerror(e), fails[e]);
			any = 1;
		}
	printf("%s\n", any ? "" : " none");
	memset(fails, 0, sizeof fails);
}

static void child(int n) {
	for (int i = 0; i < n; i++) {
		int id = semget(IPC_PRIVATE, 1, 0600);
		check(id, "semget");
		if (id < 0)
			continue;
		check(semctl(id, 0, SETVAL, 5), "SETVAL");
		check(semctl(id, 0, IPC_RMID), "IPC_RMID");
	}
	report("semget(IPC_PRIVATE), SETVAL, IPC_RMID");
	for (int i = 0; i < n; i++) {
		int id = msgget(IPC_PRIVATE, 0600);
		check(id, "msgget");
		if (id < 0)
			continue;
		struct msqid_ds ds;
		memset(&ds, 0, sizeof ds);
		ds.msg_perm.uid = getuid();
		ds.msg_perm.gid = getgid();
		ds.msg_perm.mode = 0640;
		ds.msg_qbytes = 8192;
		check(msgctl(id, IPC_SET, &ds), "IPC_SET");
		check(msgctl(id, IPC_RMID, NULL), "IPC_RMID");
	}
	report("msgget(IPC_PRIVATE), IPC_SET, IPC_RMID");
	for (int i = 0; i < n; i++) {
		int id = semget(0x5241494e, 1, IPC_CREAT | IPC_EXCL | 0600);
		check(id, "semget");
		if (id >= 0)
			check(semctl(id, 0, IPC_RMID), "IPC_RMID");
	}
	report("semget(key, IPC_CREAT|IPC_EXCL), IPC_RMID");
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n = argc > 1 ? atoi(argv[1]) : 2000;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sig;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	int pfd[2];
	if (pipe(pfd) < 0)
		return 1;
	pid_t c = fork();
	if (c == 0) {
		close(pfd[0]);
		child(n);
		fprintf(stderr, "signals handled: %ld\n", handled);
		_exit(0);
	}
	close(pfd[1]);
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	char b;
	long sent = 0;
	/* Until the child is done (EOF): varied gaps, so that signals land
	 * at every point of the calls. */
	while (read(pfd[0], &b, 1) != 0) {
		kill(c, SIGUSR1);
		sent++;
		for (volatile int k = 0; k < (int)(sent % 200) * 10; k++)
			;
	}
	waitpid(c, NULL, 0);
	fprintf(stderr, "signals sent: %ld\n", sent);
	return 0;
}
