/* msgself N [blocked|taken]: one thread sends itself an 8-byte message
 * and receives it, N times; prints the mean ns per pair. With "blocked"
 * the process has a signal pending and blocked (raised after a first IPC
 * call, once the gateway watches the process), so that the gateway
 * cannot rule out a signal racing with any msgrcv answer
 * (BenchmarkMsgrcvRaced); with "taken" it takes a signal (handled) there
 * instead, so that it has been signalled lately (TestVehicleLately). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/msg.h>
#include <time.h>

static volatile sig_atomic_t handled;
static void on_sig(int s) { (void)s; handled = 1; }

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	int msqid = msgget(IPC_PRIVATE, 0600);
	if (msqid < 0) { perror("msgget"); return 1; }
	if (argc > 2 && strcmp(argv[2], "taken") == 0) {
		signal(SIGUSR1, on_sig);
		raise(SIGUSR1);
		if (!handled) { fprintf(stderr, "SIGUSR1 not taken\n"); return 1; }
	}
	if (argc > 2 && strcmp(argv[2], "blocked") == 0) {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGUSR2);
		sigprocmask(SIG_BLOCK, &set, NULL);
		raise(SIGUSR2);
	}
	struct { long type; char text[8]; } m = {1, "x"};
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++) {
		if (msgsnd(msqid, &m, sizeof m.text, 0) < 0) { perror("msgsnd"); return 1; }
		if (msgrcv(msqid, &m, sizeof m.text, 0, 0) < 0) { perror("msgrcv"); return 1; }
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	msgctl(msqid, IPC_RMID, NULL);
	printf("%lld\n", ((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
