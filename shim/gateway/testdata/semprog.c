/* semprog: System V semaphore calls whose output must be identical when
 * run natively in a fresh IPC namespace and under the gateway. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

union semun { int val; struct semid_ds *buf; unsigned short *array; struct seminfo *__buf; };

#define R(label, expr) do { errno = 0; long r_ = (long)(expr); \
	printf("%-28s ret=%ld errno=%s\n", label, r_, r_ < 0 ? strerrorname_np(errno) : "0"); } while (0)

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && strcmp(argv[1], "compat") == 0) {
		/* i386 ipc(2) SEMGET through int $0x80, and an x32 semget. */
		long r;
		pid_t p = fork();
		if (p == 0) {
			__asm__ volatile("int $0x80" : "=a"(r) : "a"(117), "b"(2), "c"(0), "d"(1), "S"(0600 | IPC_CREAT) : "memory", "r8", "r9", "r10", "r11");
			printf("i386 ipc(SEMGET) = %ld\n", r);
			_exit(0);
		}
		int st;
		waitpid(p, &st, 0);
		if (WIFSIGNALED(st)) /* kernel without IA32 emulation */
			printf("i386 ipc(SEMGET) unavailable\n");
		r = syscall(0x40000000 | 64, IPC_PRIVATE, 1, 0600 | IPC_CREAT);
		printf("x32 semget = %ld errno=%s\n", r, r < 0 ? strerrorname_np(errno) : "0");
		return 0;
	}
	int id = semget(IPC_PRIVATE, 3, 0600 | IPC_CREAT);
	printf("semget private id=%d\n", id);
	int kid = semget(0x1234, 2, 0640 | IPC_CREAT);
	printf("semget key id=%d\n", kid);
	R("semget key excl", semget(0x1234, 2, 0640 | IPC_CREAT | IPC_EXCL));
	R("semget key missing", semget(0x4321, 1, 0));
	R("semget key bigger", semget(0x1234, 5, 0));
	R("semget nsems neg", semget(IPC_PRIVATE, -1, 0600));
	R("setval", semctl(id, 0, SETVAL, (union semun){.val = 2}));
	R("setval erange", semctl(id, 0, SETVAL, (union semun){.val = 40000}));
	R("getval", semctl(id, 0, GETVAL));
	R("getval semnum", semctl(id, 7, GETVAL));
	unsigned short all[3] = {5, 0, 9}, got[3] = {0};
	R("setall", semctl(id, 0, SETALL, (union semun){.array = all}));
	R("setall efault", semctl(id, 0, SETALL, (union semun){.array = (void *)8}));
	R("getall", semctl(id, 0, GETALL, (union semun){.array = got}));
	printf("values %d %d %d\n", got[0], got[1], got[2]);
	R("getall efault", semctl(id, 0, GETALL, (union semun){.array = (void *)8}));
	R("getpid is me", semctl(id, 0, GETPID) == getpid());
	struct semid_ds ds;
	R("ipc_stat", semctl(id, 0, IPC_STAT, (union semun){.buf = &ds}));
	printf("stat mode=%o nsems=%lu uid=%d otime0=%d ctime>0=%d\n", ds.sem_perm.mode & 0777, (unsigned long)ds.sem_nsems, ds.sem_perm.uid, ds.sem_otime == 0, ds.sem_ctime > 0);
	R("ipc_stat efault", semctl(id, 0, IPC_STAT, (union semun){.buf = (void *)8}));
	R("ipc_stat|IPC_64", semctl(id, 0, IPC_STAT | 0x100, (union semun){.buf = &ds}));
	ds.sem_perm.mode = 0644;
	R("ipc_set", semctl(id, 0, IPC_SET, (union semun){.buf = &ds}));
	R("ipc_stat again", semctl(id, 0, IPC_STAT, (union semun){.buf = &ds}));
	printf("mode now %o\n", ds.sem_perm.mode & 0777);
	struct seminfo si;
	R("ipc_info", semctl(0, 0, IPC_INFO, (union semun){.__buf = &si}));
	printf("seminfo semmsl=%d semopm=%d semmni=%d\n", si.semmsl, si.semopm, si.semmni);
	R("sem_info", semctl(0, 0, SEM_INFO, (union semun){.__buf = &si}));
	printf("sem_info semusz=%d semaem=%d\n", si.semusz, si.semaem);
	R("sem_stat", semctl(kid & 0x7fff, 0, SEM_STAT, (union semun){.buf = &ds}) == kid);
	R("bad cmd", semctl(id, 0, 99));
	R("semid neg", semctl(-1, 0, GETVAL));

	struct sembuf dec = {0, -1, 0}, inc = {0, 1, 0}, nw = {1, -1, IPC_NOWAIT};
	R("semop dec", semop(id, &dec, 1));
	R("semop nowait", semop(id, &nw, 1));
	R("semop nsops 0", semop(id, &dec, 0));
	R("semop nsops big", semop(id, &dec, 100000));
	R("semop efault", semop(id, (void *)8, 1));
	R("semop efbig", semop(id, &(struct sembuf){9, 1, 0}, 1));
	R("semop erange", semop(id, &(struct sembuf){2, 32767, 0}, 1));
	struct timespec ts = {0, 20 * 1000 * 1000};
	R("semtimedop timeout", semtimedop(id, &nw, 1, &ts) );
	struct sembuf w = {1, -1, 0};
	R("semtimedop eagain", semtimedop(id, &w, 1, &ts));
	R("semtimedop bad ts", semtimedop(id, &w, 1, (void *)8));
	R("semtimedop bad ts+nsops", semtimedop(id, &w, 0, (void *)8));
	R("semtimedop einval ts", semtimedop(id, &w, 1, &(struct timespec){0, -1}));
	R("semop bad id", semop(id + 32768 * 7, &inc, 1));

	/* A sleeper woken by another process. */
	R("setval 0", semctl(id, 1, SETVAL, (union semun){.val = 0}));
	pid_t p = fork();
	if (p == 0) {
		struct sembuf s = {1, -1, 0};
		int r = semop(id, &s, 1);
		_exit(r == 0 ? 0 : 10 + errno);
	}
	while (semctl(id, 1, GETNCNT) != 1) usleep(1000);
	R("ncnt", semctl(id, 1, GETNCNT));
	R("wake", semop(id, &(struct sembuf){1, 1, 0}, 1));
	int st;
	waitpid(p, &st, 0);
	printf("sleeper exit %d\n", WEXITSTATUS(st));
	R("after wake", semctl(id, 1, GETVAL));

	/* SEM_UNDO applied at exit. */
	R("setval 3", semctl(id, 2, SETVAL, (union semun){.val = 3}));
	p = fork();
	if (p == 0) {
		struct sembuf s = {2, -2, SEM_UNDO};
		_exit(semop(id, &s, 1) == 0 ? 0 : 1);
	}
	waitpid(p, &st, 0);
	printf("undo child exit %d\n", WEXITSTATUS(st));
	for (int i = 0; i < 200 && semctl(id, 2, GETVAL) != 3; i++) usleep(1000);
	R("after undo", semctl(id, 2, GETVAL));

	R("rmid", semctl(id, 0, IPC_RMID));
	R("after rmid", semctl(id, 0, GETVAL));
	R("rmid key", semctl(kid, 0, IPC_RMID));
	return 0;
}
