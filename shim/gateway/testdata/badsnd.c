/* msgsnd calls that Linux fails before load_msg allocates: the text of
   TestMsgsndRefusedChargesNothing. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>

static struct { long mtype; char text[8000]; } m;

int main(void) {
	int id = msgget(IPC_PRIVATE, 0600);
	if (id < 0) { perror("msgget"); return 1; }
	m.mtype = 0; /* EINVAL before load_msg in Linux */
	int r = msgsnd(id, &m, sizeof m.text, 0);
	printf("mtype 0: %d %s\n", r, r < 0 ? strerror(errno) : "");
	r = msgsnd(id, (void *)8, 8000, 0); /* EFAULT reading mtype */
	printf("bad msgp: %d %s\n", r, r < 0 ? strerror(errno) : "");
	msgctl(id, IPC_RMID, NULL);
	return 0;
}
