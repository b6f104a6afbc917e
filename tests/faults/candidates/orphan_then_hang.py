"""Fault: a child that ignores SIGTERM (FAULT_MARKER in its command line), then a long hang in the kernel:
the judge is killed while this evaluation runs."""

import os
import subprocess
import sys
import time


def kernel(x, y, a):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    subprocess.Popen([sys.executable, "-c", code, os.environ["FAULT_MARKER"]])
    time.sleep(600)
