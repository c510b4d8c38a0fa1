/* msgprog: System V message-queue calls whose output must be identical
 * when run natively in a fresh IPC namespace and under the gateway: every
 * call, its errno paths in Linux's order (EFAULT positions included), the
 * msqid64_ds and msginfo layouts, permissions, and lrpid of a message
 * handed to a sleeping thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define R(label, expr) do { errno = 0; long r_ = (long)(expr); \
	printf("%-36s ret=%ld errno=%s\n", label, r_, r_ < 0 ? strerrorname_np(errno) : "0"); } while (0)

/* Raw calls: glibc would not pass some of these arguments through. */
static long snd(long id, void *p, long sz, long flg) { return syscall(SYS_msgsnd, id, p, sz, flg); }
static long rcv(long id, void *p, long sz, long typ, long flg) { return syscall(SYS_msgrcv, id, p, sz, typ, flg); }
static long ctl(long id, long cmd, void *p) { return syscall(SYS_msgctl, id, cmd, p); }

struct mbuf { long type; char text[64]; };

static char *page0, *guard, *ro; /* RW page, PROT_NONE page, read-only page */
static long pg;

static void qstate(const char *label, int id) {
	struct msqid_ds ds;
	memset(&ds, 0xa5, sizeof ds);
	long r = ctl(id, IPC_STAT, &ds);
	printf("%-36s ret=%ld qnum=%lu cbytes=%lu qbytes=%lu mode=%o uid=%u cuid=%u lspid_me=%d lrpid_me=%d lrpid0=%d stime0=%d rtime0=%d ctime>0=%d unused=%lx/%lx\n",
	       label, r, (unsigned long)ds.msg_qnum, (unsigned long)ds.__msg_cbytes, (unsigned long)ds.msg_qbytes, ds.msg_perm.mode,
	       ds.msg_perm.uid, ds.msg_perm.cuid, ds.msg_lspid == getpid(), ds.msg_lrpid == getpid(), ds.msg_lrpid == 0,
	       ds.msg_stime == 0, ds.msg_rtime == 0, ds.msg_ctime > 0, (unsigned long)ds.__glibc_reserved4, (unsigned long)ds.__glibc_reserved5);
}


/* asleep waits (10 s at most) until thread tid sleeps in a System V IPC
 * call (natively) or in the seccomp trap (under the gateway), then reads
 * a semaphore count: an observer of sleepers, which under the gateway
 * serves every pending notification first, so the sleeper is queued as
 * the kernel's would be. A fixed pause loses on a loaded machine. */
#include "procstate.h"
static int drain_sem = -1;
static void asleep(pid_t tid) {
	char w[128];
	for (int i = 0; i < 100000; i++) {
		if (taskstate(tid, w, sizeof w) == 'S' && in_call(w)) {
			semctl(drain_sem, 0, GETNCNT);
			return;
		}
		usleep(100);
	}
}

static int tid_id;
static volatile pid_t thread_tid;
static void *receiver(void *arg) {
	(void)arg;
	struct mbuf m;
	thread_tid = gettid();
	long r = rcv(tid_id, &m, sizeof m.text, 5, 0);
	printf("thread msgrcv ret=%ld type=%ld text=%s\n", r, m.type, r > 0 ? m.text : "");
	return NULL;
}

int main(void) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	drain_sem = semget(IPC_PRIVATE, 1, 0600);
	pg = sysconf(_SC_PAGESIZE);
	page0 = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	guard = page0 + pg;
	ro = page0 + 2 * pg;
	mprotect(guard, pg, PROT_NONE);
	mprotect(ro, pg, PROT_READ);

	/* msgget */
	int id = msgget(IPC_PRIVATE, 0600 | IPC_CREAT);
	printf("msgget private id=%d\n", id);
	int kid = msgget(0x4242, 0640 | IPC_CREAT);
	printf("msgget key id=%d\n", kid);
	R("msgget key again", msgget(0x4242, 0) == kid);
	R("msgget key excl", msgget(0x4242, 0640 | IPC_CREAT | IPC_EXCL));
	R("msgget key missing", msgget(0x4343, 0600));
	R("msgget key mode > existing", msgget(0x4242, 0666));

	/* msgsnd: mtype read first, then msgsz/msqid/mtype checks, then the text */
	struct mbuf m = {1, "hello"};
	R("msgsnd", snd(id, &m, 6, 0));
	R("msgsnd NULL bad id", snd(-1, NULL, 6, 0));
	R("msgsnd NULL huge size", snd(id, NULL, 1 << 20, 0));
	R("msgsnd bad id", snd(-1, &m, 6, 0));
	R("msgsnd missing id", snd(id + 32768 * 7, &m, 6, 0));
	R("msgsnd size > msgmax", snd(id, &m, 8193, 0));
	R("msgsnd size -1", snd(id, &m, -1, 0));
	m.type = 0;
	R("msgsnd mtype 0", snd(id, &m, 6, 0));
	m.type = -5;
	R("msgsnd mtype -5 size > msgmax", snd(id, &m, 9000, 0));
	m.type = 1;
	/* mtype readable, text running into the guard page */
	struct mbuf *edge = (struct mbuf *)(guard - 16);
	edge->type = 3;
	R("msgsnd text into guard", snd(id, edge, 32, 0));
	R("msgsnd text into guard bad id", snd(-1, edge, 32, 0));
	R("msgsnd text into guard missing id", snd(id + 32768 * 7, edge, 32, 0));
	R("msgsnd text fits before guard", snd(id, edge, 8, 0));
	R("msgsnd mtype in guard", snd(id, guard, 4, 0));
	R("msgsnd from read-only page", snd(id, ro, 0, 0)); /* mtype 0 there */
	R("msgsnd size 0", snd(id, &m, 0, 0));
	m.type = 7;
	strcpy(m.text, "seven");
	R("msgsnd type 7", snd(id, &m, 6, 0));
	qstate("after sends", id);

	/* msgrcv */
	struct mbuf r;
	memset(&r, 0, sizeof r);
	R("msgrcv bad id", rcv(-1, &r, 64, 0, 0));
	R("msgrcv size -1", rcv(id, &r, -1, 0, 0));
	R("msgrcv copy without nowait", rcv(id, &r, 64, 0, MSG_COPY));
	R("msgrcv copy|except", rcv(id, &r, 64, 0, MSG_COPY | MSG_EXCEPT | IPC_NOWAIT));
	R("msgrcv copy NULL buf", rcv(id, NULL, 64, 0, MSG_COPY | IPC_NOWAIT));
	R("msgrcv copy NULL bad id", rcv(-1, NULL, 64, 0, MSG_COPY | IPC_NOWAIT));
	R("msgrcv copy into guard", rcv(id, guard - 8, 64, 0, MSG_COPY | IPC_NOWAIT));
	R("msgrcv copy idx 0", rcv(id, &r, 64, 0, MSG_COPY | IPC_NOWAIT));
	printf("  copied type=%ld text=%s\n", r.type, r.text);
	R("msgrcv copy idx 2", rcv(id, &r, 64, 2, MSG_COPY | IPC_NOWAIT));
	printf("  copied type=%ld text=%s\n", r.type, r.text);
	R("msgrcv copy idx 9", rcv(id, &r, 64, 9, MSG_COPY | IPC_NOWAIT));
	R("msgrcv copy small buf", rcv(id, &r, 2, 0, MSG_COPY | IPC_NOWAIT));
	R("msgrcv copy small buf noerror", rcv(id, &r, 2, 0, MSG_COPY | IPC_NOWAIT | MSG_NOERROR));
	R("msgrcv type 9 nowait", rcv(id, &r, 64, 9, IPC_NOWAIT));
	R("msgrcv e2big", rcv(id, &r, 2, 0, IPC_NOWAIT));
	R("msgrcv type 7", rcv(id, &r, 64, 7, 0));
	printf("  got type=%ld text=%s\n", r.type, r.text);
	R("msgrcv except 1", rcv(id, &r, 64, 1, IPC_NOWAIT | MSG_EXCEPT));
	printf("  got type=%ld\n", r.type);
	R("msgrcv noerror truncates", rcv(id, &r, 3, 0, MSG_NOERROR));
	printf("  got type=%ld text=%.3s\n", r.type, r.text);
	qstate("after receives", id);
	m.type = 4;
	R("msgsnd type 4", snd(id, &m, 6, 0));
	m.type = 2;
	R("msgsnd type 2", snd(id, &m, 6, 0));
	R("msgrcv type <= 5 (lowest)", rcv(id, &r, 64, -5, 0));
	printf("  got type=%ld\n", r.type);
	R("msgrcv into read-only", rcv(id, ro, 64, 0, 0));
	qstate("after failed copy-out (consumed)", id);
	m.type = 6;
	R("msgsnd type 6", snd(id, &m, 6, 0));
	R("msgrcv into guard", rcv(id, guard, 64, 0, 0));
	R("msgrcv text into guard", rcv(id, guard - 10, 64, 0, 0));
	/* mtype straddling the guard page: the kernel's put_user is one
	 * 8-byte store, which writes nothing when its second half faults. */
	m.type = 0x0102030405060708;
	R("msgsnd big type", snd(id, &m, 6, 0));
	memset(guard - 4, 0xaa, 4);
	R("msgrcv mtype straddling guard", rcv(id, guard - 4, 64, 0, 0));
	printf("  bytes before guard %02x%02x%02x%02x\n", (unsigned char)guard[-4], (unsigned char)guard[-3],
	       (unsigned char)guard[-2], (unsigned char)guard[-1]);
	R("msgrcv empty nowait", rcv(id, &r, 64, 0, IPC_NOWAIT));
	qstate("empty", id);

	/* msgctl */
	struct msqid_ds ds;
	R("msgctl bad id", ctl(-1, IPC_STAT, &ds));
	R("msgctl cmd -1", ctl(id, -1, &ds));
	R("msgctl cmd 99", ctl(id, 99, &ds));
	R("msgctl IPC_STAT|IPC_64", ctl(id, IPC_STAT | 0x100, &ds));
	R("msgctl IPC_STAT NULL", ctl(id, IPC_STAT, NULL));
	R("msgctl IPC_STAT read-only", ctl(id, IPC_STAT, ro));
	R("msgctl IPC_STAT missing", ctl(id + 32768 * 7, IPC_STAT, &ds));
	R("msgctl MSG_STAT idx", ctl(id % 32768, MSG_STAT, &ds) == id);
	R("msgctl MSG_STAT_ANY idx", ctl(kid % 32768, MSG_STAT_ANY, &ds) == kid);
	R("msgctl MSG_STAT idx 999", ctl(999, MSG_STAT, &ds));
	struct msginfo mi;
	memset(&mi, 0xa5, sizeof mi);
	R("msgctl IPC_INFO", ctl(0, IPC_INFO, &mi));
	printf("  pool=%d map=%d max=%d mnb=%d mni=%d ssz=%d tql=%d seg=%u pad=%x\n", mi.msgpool, mi.msgmap, mi.msgmax, mi.msgmnb,
	       mi.msgmni, mi.msgssz, mi.msgtql, mi.msgseg, ((unsigned char *)&mi)[30] | ((unsigned char *)&mi)[31] << 8);
	m.type = 1;
	snd(kid, &m, 6, 0);
	snd(kid, &m, 3, 0);
	R("msgctl MSG_INFO", ctl(0, MSG_INFO, &mi));
	printf("  pool=%d map=%d max=%d mnb=%d mni=%d ssz=%d tql=%d seg=%u\n", mi.msgpool, mi.msgmap, mi.msgmax, mi.msgmnb,
	       mi.msgmni, mi.msgssz, mi.msgtql, mi.msgseg);
	R("msgctl IPC_INFO NULL", ctl(0, IPC_INFO, NULL));
	R("msgctl IPC_INFO bad id", ctl(-1, IPC_INFO, &mi));
	ctl(id, IPC_STAT, &ds);
	ds.msg_qbytes = 100;
	ds.msg_perm.mode = 0664;
	R("msgctl IPC_SET", ctl(id, IPC_SET, &ds));
	qstate("after IPC_SET", id);
	R("msgctl IPC_SET NULL", ctl(id, IPC_SET, NULL));
	R("msgctl IPC_SET NULL bad id", ctl(-1, IPC_SET, NULL));
	R("msgctl IPC_SET guard", ctl(id, IPC_SET, guard - 60));
	ds.msg_qbytes = 1 << 20;
	R("msgctl IPC_SET qbytes > mnb (root)", ctl(id, IPC_SET, &ds));
	ds.msg_qbytes = 16;
	ctl(id, IPC_SET, &ds);
	m.type = 1;
	R("msgsnd 10", snd(id, &m, 10, IPC_NOWAIT));
	R("msgsnd full nowait", snd(id, &m, 10, IPC_NOWAIT));
	R("msgsnd too big for queue nowait", snd(id, &m, 20, IPC_NOWAIT));
	rcv(id, &r, 64, 0, IPC_NOWAIT);

	/* permissions: an unprivileged child */
	ds.msg_perm.mode = 0600;
	ds.msg_qbytes = 16384;
	ctl(id, IPC_SET, &ds);
	pid_t p = fork();
	if (p == 0) {
		if (setgid(65534) || setuid(65534)) {
			perror("setuid");
			_exit(1);
		}
		R("  nobody msgget key", msgget(0x4242, 0));
		R("  nobody msgget key read", msgget(0x4242, 0444));
		R("  nobody msgsnd", snd(id, &m, 4, IPC_NOWAIT));
		R("  nobody msgrcv", rcv(id, &r, 64, 0, IPC_NOWAIT));
		R("  nobody IPC_STAT", ctl(id, IPC_STAT, &ds));
		R("  nobody MSG_STAT", ctl(id % 32768, MSG_STAT, &ds));
		R("  nobody MSG_STAT_ANY", ctl(id % 32768, MSG_STAT_ANY, &ds) == id);
		R("  nobody IPC_SET", ctl(id, IPC_SET, &ds));
		R("  nobody IPC_RMID", ctl(id, IPC_RMID, NULL));
		R("  nobody msgsnd kid (0640)", snd(kid, &m, 4, IPC_NOWAIT));
		_exit(0);
	}
	int st;
	waitpid(p, &st, 0);

	/* a message handed to a sleeping child process, then to a sleeping
	 * thread: lrpid is the receiving thread's id */
	tid_id = msgget(IPC_PRIVATE, 0600);
	p = fork();
	if (p == 0) {
		long rr = rcv(tid_id, &r, 64, 5, 0);
		printf("child msgrcv ret=%ld type=%ld\n", rr, r.type);
		_exit(0);
	}
	asleep(p);
	m.type = 5;
	long sr = snd(tid_id, &m, 6, 0);
	waitpid(p, &st, 0); /* the child prints first, always */
	R("msgsnd to sleeping child", sr);
	ctl(tid_id, IPC_STAT, &ds);
	printf("lrpid is child=%d\n", ds.msg_lrpid == p);
	pthread_t th;
	pthread_create(&th, NULL, receiver, NULL);
	while (!thread_tid)
		usleep(100);
	asleep(thread_tid);
	strcpy(m.text, "thr");
	sr = snd(tid_id, &m, 4, 0);
	pthread_join(th, NULL);
	R("msgsnd to sleeping thread", sr);
	ctl(tid_id, IPC_STAT, &ds);
	printf("lrpid is thread=%d is process=%d\n", ds.msg_lrpid == thread_tid, ds.msg_lrpid == getpid());
	/* a sleeping sender woken by a receive */
	ds.msg_qbytes = 8;
	ctl(tid_id, IPC_SET, &ds);
	snd(tid_id, &m, 8, 0);
	p = fork();
	if (p == 0) {
		long rr = snd(tid_id, &m, 8, 0);
		printf("child msgsnd ret=%ld\n", rr);
		_exit(0);
	}
	asleep(p);
	sr = rcv(tid_id, &r, 64, 0, 0);
	waitpid(p, &st, 0);
	R("msgrcv wakes sender", sr);
	qstate("after woken sender", tid_id);
	/* removal wakes sleepers with EIDRM */
	p = fork();
	if (p == 0) {
		long rr = rcv(tid_id, &r, 64, 99, 0);
		printf("child msgrcv after rmid ret=%ld errno=%s\n", rr, rr < 0 ? strerrorname_np(errno) : "0");
		_exit(0);
	}
	asleep(p);
	sr = ctl(tid_id, IPC_RMID, NULL);
	waitpid(p, &st, 0);
	R("msgctl IPC_RMID", sr);
	R("msgctl IPC_RMID again", ctl(tid_id, IPC_RMID, NULL));
	R("msgctl IPC_RMID id", ctl(id, IPC_RMID, NULL));
	R("msgctl IPC_RMID kid", ctl(kid, IPC_RMID, NULL));
	R("msgsnd removed", snd(id, &m, 4, 0));
	semctl(drain_sem, 0, IPC_RMID);
	return 0;
}
