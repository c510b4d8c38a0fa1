# msgtest.py: python3-sysv-ipc message queues; output must match native.
import os, sysv_ipc
q = sysv_ipc.MessageQueue(None, sysv_ipc.IPC_CREX)
q.send(b"hello", type=1)
q.send(b"world!", type=3)
q.send("text", type=2)
print("current_messages", q.current_messages, "max_size", q.max_size, "mode", oct(q.mode))
print("receive type 3", q.receive(type=3))
print("receive lowest <= 3", q.receive(type=-3))
print("receive any", q.receive())
try:
    q.receive(block=False)
except sysv_ipc.BusyError:
    print("busy (nowait)")
q.max_size = 8
print("max_size", q.max_size)
q.send(b"12345678", type=5)
try:
    q.send(b"x", block=False)
except sysv_ipc.BusyError:
    print("full (nowait)")
pid = os.fork()
if pid == 0:
    q.send(b"child", type=7)
    os._exit(0)
print("drain", q.receive(type=5))
os.waitpid(pid, 0)
print("child's", q.receive(type=7))
print("last_send_pid is child", q.last_send_pid == pid, "last_receive_pid is me", q.last_receive_pid == os.getpid())
try:
    sysv_ipc.MessageQueue(q.key, sysv_ipc.IPC_CREX)
except sysv_ipc.ExistentialError:
    print("exists")
q.remove()
try:
    q.send(b"x")
except (sysv_ipc.ExistentialError, OSError) as e:
    print("removed", type(e).__name__)
