"""kernelbook: reproducible GPU kernel performance studies."""

import time as _time

__version__ = "0.1.0"
# When this process imported kernelbook (its start, for `python -m kernelbook`): the jobs'
# start-up is counted from here (the measurements' job_startup_s).
STARTED = _time.monotonic()

# What a process runs as it ends, whether it exits normally (atexit runs these) or is a job
# server's child leaving through os._exit, which runs no exit handlers (it calls
# ``at_exit_run``): the GPU ledger's line (kernelbook.gpu).
_AT_EXIT: list = []


def at_exit(fn) -> None:
    import atexit

    _AT_EXIT.append(fn)
    atexit.register(fn)


def at_exit_run() -> None:
    import contextlib

    for fn in _AT_EXIT:
        with contextlib.suppress(Exception):  # a record of the run, never the job's failure
            fn()
