"""A fork server for the GPU jobs: the imports paid once per run, not once per job.

A bench job spends about 5 s of an H200 run starting up (the interpreter, torch, CuPy,
Triton, pandas) and 3 s measuring, so a run of 255 bench jobs pays over 20 minutes of
start-up. Here the first job starts a server that imports those libraries once (without
initialising CUDA) and listens on a Unix socket; each job is then a thin client that hands
the server its command line, working directory, environment and its standard streams
(``socket.send_fds``), and the server forks a child that runs the job as
``kernelbook.cli.main`` would in a process of its own. The child initialises CUDA itself,
takes the GPU's lock itself, writes its own log through the client's streams, and its exit
status is the client's. So every job keeps its own process, its own CUDA context and its own
failure: a crash or a hang ends that child alone, and the rows it wrote first are on disk.

The client's end is the child's end: a client killed (Snakemake cancelling a job, a time
limit) closes the socket, and the server kills that child's process group at once. The
server's end is its children's: terminated, it kills them, and each client fails with one
line saying so (it does not run the job again itself: the job may have written part of its
outputs).

The server leaves after ``IDLE_S`` seconds without a job, and serves only clients of the
same interpreter and the same library sources (the socket's name is a hash of both): a
changed source tree starts a new server. Where no server can be had (no Unix sockets, a
spawn that fails, ``KERNELBOOK_JOBSERVER=0``) the job runs in its own process as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = "KERNELBOOK_JOBSERVER"  # "0" runs every job in its own interpreter
IDLE_ENV = "KERNELBOOK_JOBSERVER_IDLE_S"
IDLE_S = 120.0  # the server leaves after this long without a job (default of IDLE_ENV)
SPAWN_WAIT_S = 60.0  # how long a client waits for a server it started to listen
# Imported by the server before it forks (none of them initialises CUDA on import).
PRELOAD = (
    "numpy",
    "pandas",
    "pyarrow.parquet",
    "cupy",
    "torch",
    "triton",
    "kernelbook.cli",
    "kernelbook.measure.job",
    "kernelbook.measure.device",
    "kernelbook.profile.job",
)
ENTRY = "kernelbook.cli:main"
_MAX_REQUEST = 1 << 20
IN_CHILD = False  # True in a job the server forked (it must not ask a server again)


def enabled(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get(ENV, "1").strip().lower() not in ("0", "no", "off", "false")


def _sources_key() -> str:
    """A hash of the interpreter, the import path and every source of the library: a
    server serves only the code its clients would have imported themselves."""
    h = hashlib.sha256()
    h.update(sys.executable.encode())
    h.update("\0".join(sys.path).encode())
    pkg = Path(__file__).resolve().parent
    for p in sorted(pkg.rglob("*")):
        if p.suffix in (".py", ".yaml") and p.is_file():
            st = p.stat()
            h.update(f"{p.relative_to(pkg)}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def socket_path(entry: str = ENTRY) -> Path:
    """Where this library's server listens (per user, sources and entry point)."""
    key = hashlib.sha256(f"{_sources_key()}|{entry}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"kernelbook-jobserver-{os.getuid()}-{key}.sock"


# ------------------------------------------------------------------------------------------
# The client


def _connect(path: Path) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
    except OSError:
        s.close()
        return None
    return s


def _spawn(path: Path, entry: str) -> socket.socket | None:
    """Start a server (one at a time: a lock beside the socket) and connect to it."""
    lock = open(f"{path}.lock", "a+")  # noqa: SIM115 - held while spawning
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _connect(path)  # another client started one meanwhile
        if conn is not None:
            return conn
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead server's socket
        log = open(f"{path}.log", "ab")  # noqa: SIM115 - handed to the server
        subprocess.Popen(
            [sys.executable, "-m", "kernelbook.jobserver", str(path), entry],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # outlives this job; not in Snakemake's process group
            close_fds=True,
        )
        log.close()
        deadline = time.monotonic() + SPAWN_WAIT_S
        while time.monotonic() < deadline:
            conn = _connect(path)
            if conn is not None:
                return conn
            time.sleep(0.05)
        return None
    finally:
        lock.close()


def run(argv: list[str], entry: str = ENTRY) -> int | None:
    """Run ``entry(argv)`` in a child of this library's server: its exit status, or None
    where no server can serve (the caller then runs the job itself)."""
    if not enabled() or not hasattr(socket, "send_fds"):
        return None
    path = socket_path(entry)
    conn = _connect(path) or _spawn(path, entry)
    if conn is None:
        return None
    with conn:
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)})
        try:
            socket.send_fds(conn, [request.encode() + b"\n"], [0, 1, 2])
        except OSError:  # the server did not take it: run it here
            return None
        try:
            reply = conn.makefile("rb").readline()
        except OSError:
            reply = b""
        if not reply:
            # taken, then no answer: the job may have run, in part or whole; running it
            # again here could write its outputs twice at once, so it fails, saying why
            print(
                f"kernelbook: error: the job server ({path}) went away while it ran "
                f"`kernelbook {' '.join(argv[:4])} ...`; run it again",
                file=sys.stderr,
                flush=True,
            )
            return 1
        return int(json.loads(reply)["status"])


# ------------------------------------------------------------------------------------------
# The server


def _status(wait_status: int) -> int:
    """A shell's exit status for a child's wait status (128 + signal where killed)."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


def _child(entry, request: dict, fds: list[int]) -> None:
    """In the forked child: become the job's own process, run it, leave with its status."""
    global IN_CHILD
    IN_CHILD = True
    status = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setpgid(0, 0)  # the server kills the whole group if the client goes
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[ENV] = "0"  # a kernelbook the job runs runs on its own, never here again
        import kernelbook

        kernelbook.STARTED = time.monotonic()  # the job's start-up is its own, from here
        sys.argv = ["kernelbook", *request["argv"]]
        try:
            status = entry(request["argv"])
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        status = int(status or 0)
    except BaseException:  # noqa: BLE001 - reported on the job's own stderr
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        with contextlib.suppress(Exception):
            import kernelbook

            kernelbook.at_exit_run()  # os._exit runs no exit handlers
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)


def serve(path: Path, entry_name: str = ENTRY, idle_s: float | None = None) -> int:
    """Preload, listen at ``path``, fork a child per request until idle for ``idle_s``
    (default: $KERNELBOOK_JOBSERVER_IDLE_S, else IDLE_S)."""
    if idle_s is None:
        idle_s = float(os.environ.get(IDLE_ENV, IDLE_S))
    for name in PRELOAD:
        with contextlib.suppress(Exception):  # a job says what is missing, itself
            importlib.import_module(name)
    module, _, func = entry_name.partition(":")
    entry = getattr(importlib.import_module(module), func)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = Path(f"{path}.{os.getpid()}")
    listener.bind(str(tmp))
    listener.listen(64)
    os.replace(tmp, path)  # atomically: a client never connects to a half-made socket
    ours = os.stat(path).st_ino
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    jobs: dict[socket.socket, int] = {}  # client connection -> its child's pid
    last = time.monotonic()
    try:
        while not stop and (jobs or time.monotonic() - last < idle_s):
            ready, _, _ = select.select([listener, *jobs], [], [], 0.05)
            for s in ready:
                if s is listener:
                    conn, _ = listener.accept()
                    msg, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
                    if len(fds) != 3 or not msg.endswith(b"\n"):
                        for fd in fds:
                            os.close(fd)
                        conn.close()
                        continue
                    pid = os.fork()
                    if pid == 0:
                        listener.close()
                        for c in jobs:
                            c.close()
                        conn.close()
                        _child(entry, json.loads(msg), fds)
                    with contextlib.suppress(OSError):  # as the child does: no race
                        os.setpgid(pid, pid)
                    for fd in fds:
                        os.close(fd)
                    jobs[conn] = pid
                elif not s.recv(1, socket.MSG_PEEK):  # the client left: so does its job
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(jobs[s], signal.SIGKILL)
            for conn, pid in list(jobs.items()):
                done, wait_status = os.waitpid(pid, os.WNOHANG)
                if done:
                    with contextlib.suppress(OSError):
                        conn.sendall(json.dumps({"status": _status(wait_status)}).encode() + b"\n")
                    conn.close()
                    del jobs[conn]
                    last = time.monotonic()
    finally:
        for conn, pid in jobs.items():  # terminated: no job outlives its server
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            conn.close()
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ours:  # not a newer server's socket
                path.unlink()
        listener.close()
    return 0


if __name__ == "__main__":
    # through the module's own name, so that the children see one IN_CHILD (not __main__'s)
    from kernelbook import jobserver

    raise SystemExit(jobserver.serve(Path(sys.argv[1]), *sys.argv[2:3]))
