"""Job entry points for tests/test_jobserver.py: what a served job can do (print, fail,
crash, outlive its client, ask for a server itself, hold a GPU)."""

import json
import os
import signal
import sys
import time


def main(argv):
    what = argv[0]
    if what == "echo":
        print(json.dumps({
            "argv": argv, "cwd": os.getcwd(), "x": os.environ.get("KB_TEST_X"),
            "server": os.getppid(), "pid": os.getpid(),
        }))  # fmt: skip
        print("to stderr", file=sys.stderr)
        return int(argv[1]) if len(argv) > 1 else 0
    if what == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if what == "sleep":
        with open(argv[1], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
        return 0
    if what == "hold":  # as a GPU job does once it has its GPU's lock
        from kernelbook import gpu

        gpu.hold_begins("GPU-test", shared=False)
        return 0
    if what == "nested":
        from kernelbook import jobserver

        print(json.dumps({"nested": jobserver.run(["echo"], entry="jobserver_entry:main")}))
        return 0
    raise SystemExit(f"unknown: {what}")
