# python3-sysv-ipc: a semaphore handed between two processes, then a
# message queue round trip.
import os, sys, sysv_ipc
s = sysv_ipc.Semaphore(0x4811, sysv_ipc.IPC_CREX, initial_value=0)
pid = os.fork()
if pid == 0:
    import time; time.sleep(0.2); s.release(); os._exit(0)
s.acquire(timeout=10)
os.waitpid(pid, 0)
print("python-sem ok value=%d" % s.value, flush=True)
s.remove()
try:
    q = sysv_ipc.MessageQueue(0x4812, sysv_ipc.IPC_CREX)
except Exception as e:
    print("python-msg msgget failed: %s" % e); sys.exit(0)
pid = os.fork()
if pid == 0:
    m, _ = q.receive(type=1); q.send(b"pong:" + m, type=2); os._exit(0)
q.send(b"ping", type=1)
m, _ = q.receive(type=2)
os.waitpid(pid, 0)
q.remove()
print("python-msg ok %s" % m.decode())
