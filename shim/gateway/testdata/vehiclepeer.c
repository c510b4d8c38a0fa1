/* vehiclepeer: a process in an IPC namespace of its own (run under
 * unshare -i) that receives from a vehicle natively, as a thread that
 * took a CONTINUE does (vehicle_test.go). It prints its ready line, then
 * for each line "MSQID MSGSZ MSGTYP MSGFLG" on stdin makes that msgrcv
 * and prints "ret=R errno=E type=T len=L text=PREFIX". */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/msg.h>

int main(void) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	static struct { long type; char text[65536]; } m;
	printf("ready\n");
	long id, sz, typ;
	int flg;
	while (scanf("%ld %ld %ld %d", &id, &sz, &typ, &flg) == 4) {
		memset(&m, 0, sizeof m);
		errno = 0;
		long r = msgrcv((int)id, &m, (size_t)sz, typ, flg);
		printf("ret=%ld errno=%s type=%ld len=%zu text=%.8s\n", r, r < 0 ? strerrorname_np(errno) : "0",
			m.type, r < 0 ? 0 : strnlen(m.text, sizeof m.text), m.text);
	}
	return 0;
}
