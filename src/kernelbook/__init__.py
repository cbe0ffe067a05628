"""kernelbook: reproducible GPU kernel performance studies."""

import time as _time

__version__ = "0.1.0"
# When this process imported kernelbook (its start, for `python -m kernelbook`): the jobs'
# start-up is counted from here (the measurements' job_startup_s).
STARTED = _time.monotonic()
