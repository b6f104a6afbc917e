"""#5 deferred work on a thread started at import: the kernel hands (inputs, output) to a worker thread
that existed before the call, and returns an unwritten output. The thread waits until the harness's
``Harness.call`` has returned (the deferred-write fingerprint and the thread census are over), then
writes the answer, before the judge's ``fetch`` is served (it shortens the GIL switch interval so it
gets to run as soon as the main thread lets go).

Task: axpby, timed. What should catch it: the output at return differs from the output the judge reads
(deferred_write), or a thread that predates the call doing work after it returns (background_thread).
"""

import queue
import sys
import threading
import time

import torch

_JOBS = queue.Queue()
_MAIN = threading.main_thread().ident


def _harness_call_running() -> bool:
    frame = sys._current_frames().get(_MAIN)
    while frame is not None:
        if frame.f_code.co_name == "call" and frame.f_code.co_filename.endswith("worker.py"):
            return True
        frame = frame.f_back
    return False


def _worker():
    while True:
        job = _JOBS.get()
        while _harness_call_running():
            time.sleep(0)
        while True:  # a newer call came meanwhile: only the newest call's output will ever be read
            try:
                job = _JOBS.get_nowait()
            except queue.Empty:
                break
        out, x, y, a = job
        torch.add(y, x, alpha=a, out=out)


sys.setswitchinterval(20e-6)  # the GIL changes hands every 20 us, so the worker runs as soon as it may
threading.Thread(target=_worker, name="prefetch", daemon=True).start()


def kernel(x, y, a):
    out = torch.empty_like(x)
    _JOBS.put((out, x, y, a))
    return out
