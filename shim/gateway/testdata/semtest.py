# semtest.py: python3-sysv-ipc semaphores; output must match native.
import os, sys, time, sysv_ipc
s = sysv_ipc.Semaphore(None, sysv_ipc.IPC_CREX, initial_value=2)
print("value", s.value)
s.acquire(); print("after acquire", s.value)
s.release(); s.release(); print("after 2 releases", s.value)
s.value = 0
try:
    s.acquire(0)
except sysv_ipc.BusyError:
    print("busy (nowait)")
t = time.time()
try:
    s.acquire(0.2)
except sysv_ipc.BusyError:
    print("busy (timeout)", round(time.time() - t, 1) >= 0.2)
s.undo = True
s.release(); print("undo release", s.value)
pid = os.fork()
if pid == 0:
    s.acquire(); os._exit(0)
os.waitpid(pid, 0)
print("after child acquire with undo + exit", s.value)
try:
    sysv_ipc.Semaphore(s.key, sysv_ipc.IPC_CREX)
except sysv_ipc.ExistentialError:
    print("exists")
s.remove()
try:
    s.value
except sysv_ipc.ExistentialError:
    print("removed")
