/* msgrcvbuf: msgrcv of a queued message, interrupted by a signal whose
 * handler lacks SA_RESTART as its answer is about to be sent. The gateway
 * test sends the signal from inside the gateway (an answer hook), once
 * the message is dequeued and before the message is written into the
 * caller's buffer and the answer sent. Natively a msgrcv that fails with
 * EINTR took nothing (ipc/msg.c: do_msgrcv copies out only a message it
 * dequeued, and returns its size): the buffer is as it was and the
 * message still queued. One that succeeded has the message in the
 * buffer and left the queue empty.
 *
 * usage: msgrcvbuf REPS
 * prints one line per outcome seen: "eintr: N" and "ok: N", then "bad: N"
 * and the first bad round's description. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <unistd.h>

static void on_sig(int s) { (void)s; }

struct msg {
	long mtype;
	char mtext[64];
};

int main(int argc, char **argv) {
	int reps = argc > 1 ? atoi(argv[1]) : 20;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sig; /* no SA_RESTART: the call fails with EINTR */
	sigaction(SIGUSR1, &sa, NULL);
	int q = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
	if (q < 0) {
		perror("msgget");
		return 1;
	}
	int eintr = 0, ok = 0, bad = 0;
	char first[256] = "";
	for (int i = 0; i < reps; i++) {
		struct msg m = {.mtype = 1};
		snprintf(m.mtext, sizeof m.mtext, "message %d", i);
		if (msgsnd(q, &m, sizeof m.mtext, 0) < 0) {
			perror("msgsnd");
			return 1;
		}
		struct msg r;
		memset(&r, 'X', sizeof r);
		ssize_t n = msgrcv(q, &r, sizeof r.mtext, 0, 0);
		int err = errno;
		struct msqid_ds ds;
		if (msgctl(q, IPC_STAT, &ds) < 0) {
			perror("msgctl");
			return 1;
		}
		char why[200] = "";
		if (n < 0 && err == EINTR) {
			eintr++;
			int untouched = 1;
			for (size_t k = 0; k < sizeof r; k++)
				untouched &= ((unsigned char *)&r)[k] == 'X';
			if (!untouched)
				snprintf(why, sizeof why, "round %d: EINTR but the buffer was written (\"%.20s\")", i, r.mtext);
			else if (ds.msg_qnum != 1)
				snprintf(why, sizeof why, "round %d: EINTR but %lu messages queued", i, (unsigned long)ds.msg_qnum);
			/* take it back out for the next round */
			while (msgrcv(q, &r, sizeof r.mtext, 0, IPC_NOWAIT) < 0 && errno == EINTR)
				;
		} else if (n == (ssize_t)sizeof m.mtext) {
			ok++;
			if (strcmp(r.mtext, m.mtext) != 0 || ds.msg_qnum != 0)
				snprintf(why, sizeof why, "round %d: got \"%.20s\", %lu queued", i, r.mtext, (unsigned long)ds.msg_qnum);
		} else {
			snprintf(why, sizeof why, "round %d: msgrcv %zd, %s", i, n, strerror(err));
		}
		if (why[0]) {
			if (!bad)
				snprintf(first, sizeof first, "%s", why);
			bad++;
		}
	}
	msgctl(q, IPC_RMID, NULL);
	printf("eintr: %d\nok: %d\nbad: %d %s\n", eintr, ok, bad, first);
	return 0;
}
