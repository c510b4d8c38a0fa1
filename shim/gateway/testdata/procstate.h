/* procstate.h: what /proc says of a test's child, for the C test programs
 * that must wait for a state (never a fixed pause): its state letter, its
 * wchan, whether that is a System V IPC sleep, whether it has exited,
 * and a wait until it sleeps in a call. Needs <fcntl.h>, <signal.h>,
 * <stdio.h>, <string.h>, <sys/wait.h>, <time.h>, <unistd.h>. */
#ifndef PROCSTATE_H
#define PROCSTATE_H

static void readproc(pid_t pid, const char *file, char *buf, size_t n) {
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
	buf[0] = 0;
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return;
	ssize_t r = read(fd, buf, n - 1);
	close(fd);
	buf[r > 0 ? r : 0] = 0;
}

/* taskstate returns pid's state letter (R, S, T, Z, ...) and puts its wchan
 * in wchan. A thread's tid works as pid. */
static char taskstate(pid_t pid, char *wchan, size_t n) {
	char st[512];
	readproc(pid, "stat", st, sizeof st);
	readproc(pid, "wchan", wchan, n);
	char *p = strrchr(st, ')'); /* comm may hold spaces */
	return p && p[1] == ' ' ? p[2] : '?';
}

/* in_call reports whether wchan is where a task sleeps in a System V IPC
 * call: the kernel's own wait, or the seccomp notifier's (the gateway).
 * The compiler may have renamed a function (seccomp_do_user_notification.isra.0). */
static int in_call(const char *wchan) {
	static const char *const at[] = {"do_msgrcv", "do_msgsnd", "__do_semtimedop",
		"do_semtimedop", "seccomp_do_user_notification", NULL};
	size_t n = strcspn(wchan, ".");
	for (int i = 0; at[i]; i++)
		if (strlen(at[i]) == n && strncmp(wchan, at[i], n) == 0)
			return 1;
	return 0;
}

/* exited reports whether child p has exited (leaving it to be reaped). */
static inline int exited(pid_t p) {
	siginfo_t si;
	memset(&si, 0, sizeof si);
	return waitid(P_PID, p, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == p;
}

/* await_asleep waits (10 s at most) until child p is asleep in a call, or gone. */
static inline void await_asleep(pid_t p) {
	char wchan[128];
	char st = '?';
	for (int i = 0; i < 20000; i++) {
		if (exited(p))
			return;
		st = taskstate(p, wchan, sizeof wchan);
		if (st == 'S' && in_call(wchan))
			return;
		struct timespec ts = {0, 500000};
		nanosleep(&ts, NULL);
	}
	printf("  TIMEOUT waiting for the child: state %c wchan %s\n", st, wchan);
}

#endif
