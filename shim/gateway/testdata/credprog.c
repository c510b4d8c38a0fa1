/* credprog: permission checks after capset(2) changes the effective
 * capabilities and no id: the output must be identical natively and under
 * the gateway (a cached caller must not keep capabilities it dropped). */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

union semun { int val; struct semid_ds *buf; unsigned short *array; };

#define R(label, expr) do { errno = 0; long r_ = (long)(expr); \
	printf("%-32s ret=%ld errno=%s\n", label, r_, r_ < 0 ? strerrorname_np(errno) : "0"); } while (0)

static struct __user_cap_data_struct caps[2];

/* effective sets the effective bit of cap to on; permitted is kept. */
static long effective(int cap, int on) {
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	if (syscall(SYS_capget, &h, caps) != 0)
		return -1;
	if (on)
		caps[cap / 32].effective |= 1u << (cap % 32);
	else
		caps[cap / 32].effective &= ~(1u << (cap % 32));
	return syscall(SYS_capset, &h, caps);
}

int main(void) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* A set created by uid 1000, mode 0600: root reaches it only with
	 * CAP_IPC_OWNER, and removes it only with CAP_SYS_ADMIN. */
	pid_t p = fork();
	if (p == 0) {
		if (setgid(1000) != 0 || setuid(1000) != 0)
			_exit(2);
		_exit(semget(0x5eed, 1, 0600 | IPC_CREAT) < 0 || semget(0x5eee, 1, 0660 | IPC_CREAT) < 0);
	}
	int st;
	waitpid(p, &st, 0);
	printf("creator exit %d\n", WEXITSTATUS(st));
	int id = semget(0x5eed, 0, 0);
	printf("semget id=%d\n", id);
	R("GETVAL with CAP_IPC_OWNER", semctl(id, 0, GETVAL));
	R("drop CAP_IPC_OWNER", effective(CAP_IPC_OWNER, 0));
	R("GETVAL without", semctl(id, 0, GETVAL));
	struct semid_ds ds;
	union semun arg = { .buf = &ds };
	R("IPC_STAT without", semctl(id, 0, IPC_STAT, arg));
	struct sembuf op = { 0, 1, 0 };
	R("semop without", semop(id, &op, 1));
	R("raise CAP_IPC_OWNER", effective(CAP_IPC_OWNER, 1));
	R("GETVAL with it again", semctl(id, 0, GETVAL));
	R("semop with it", semop(id, &op, 1));
	/* Supplementary groups without an id change: group 1000 may use the
	 * 0660 set of uid 1000, others may not. */
	int gid = semget(0x5eee, 0, 0);
	gid_t g1000 = 1000;
	R("drop CAP_IPC_OWNER again", effective(CAP_IPC_OWNER, 0));
	R("setgroups []", setgroups(0, NULL));
	R("GETVAL 0660 set, no group", semctl(gid, 0, GETVAL));
	R("setgroups [1000]", setgroups(1, &g1000));
	R("GETVAL 0660 set, in group", semctl(gid, 0, GETVAL));
	R("setgroups [] again", setgroups(0, NULL));
	R("GETVAL 0660 set, out again", semctl(gid, 0, GETVAL));
	R("raise CAP_IPC_OWNER", effective(CAP_IPC_OWNER, 1));
	R("drop CAP_SYS_ADMIN", effective(CAP_SYS_ADMIN, 0));
	R("IPC_RMID without", semctl(id, 0, IPC_RMID));
	R("raise CAP_SYS_ADMIN", effective(CAP_SYS_ADMIN, 1));
	R("IPC_RMID with it", semctl(id, 0, IPC_RMID));
	R("IPC_RMID 0660 set", semctl(gid, 0, IPC_RMID));
	return 0;
}
