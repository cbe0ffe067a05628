"""The GPU locks: which job may use which GPU, and how (node-local flock on real files).

Each GPU has, in the lock folder (lock_dir):
- ``<host>-<uuid>.lock``, the GPU's lock. A job that times or profiles holds it exclusive;
  work that only checks holds it shared (compute-sanitizer, a bench's checks and set-up):
  several at once, never beside an exclusive holder.
- ``<host>-<uuid>.queue``, its turnstile. A job waiting to hold the GPU exclusive holds the
  turnstile while it waits; a shared taker passes it (takes it shared for a moment) only
  while no one waits there. Once a timer queues, no new checker starts on that GPU: the
  checkers on it finish, and the timer never starves behind a stream of checkers.
- ``<host>-<uuid>.seat-<k>``, a job's seat on the GPU, held for the job's life: how many
  jobs a GPU has, so that a new job goes to the least loaded one (a bench job stays on the
  GPU of its checks for its timing: its CUDA context is there).
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import sys
import time
from pathlib import Path

# GPU locks must live on this node's own disk or memory: a folder shared between nodes
# would make jobs on different hosts wait on each other's GPUs (or, where flock is not
# coherent across hosts, not wait at all). See lock_dir().
LOCK_DIR_ENV = "KERNELBOOK_LOCK_DIR"
LOCK_DIR_DEFAULTS = ("/tmp/kernelbook-gpu-locks", "$XDG_RUNTIME_DIR/kernelbook-gpu-locks")
# Filesystems that one host shares with others (mount types of /proc/self/mounts).
SHARED_FS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "fuse.ceph",
        "fuse.cephfs",
        "glusterfs",
        "fuse.glusterfs",
        "fuse.sshfs",
        "afs",
        "panfs",
        "pvfs2",
        "orangefs",
        "ocfs2",
        "gfs2",
        "wekafs",
        "cvfs",
        "fuse.juicefs",
    }
)
# Seats a GPU has (jobs counted on it); a job past the last runs without one.
SEATS = 32
POLL_S = 0.02  # between tries of a lock that is held


class NoGpu(RuntimeError):
    """No CUDA device can be had for a job that needs one."""


class LockDirError(NoGpu):
    """The GPU lock folder would be shared with other hosts."""


def filesystem_type(path: str | Path) -> str:
    """The mount type (ext4, tmpfs, nfs4, lustre ...) of the filesystem holding ``path``, or
    "" where /proc/self/mounts cannot say (the nearest existing parent is looked up)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    p = p.resolve()
    best, kind = "", ""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = str(p) == mount or str(p).startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind


def lock_dir() -> Path:
    """The node-local folder of the GPU locks.

    $KERNELBOOK_LOCK_DIR if set, else /tmp/kernelbook-gpu-locks, else (/tmp on a shared
    filesystem) $XDG_RUNTIME_DIR/kernelbook-gpu-locks. A folder on a filesystem shared
    between hosts (NFS, Lustre, GPFS, BeeGFS, CephFS ...) is refused: set KERNELBOOK_LOCK_DIR
    to a local one. Lock files carry the host name besides the GPU's UUID as well.
    """
    explicit = os.environ.get(LOCK_DIR_ENV)
    candidates = [explicit] if explicit else [os.path.expandvars(d) for d in LOCK_DIR_DEFAULTS]
    refused = []
    for d in candidates:
        if "$" in d:  # $XDG_RUNTIME_DIR unset
            continue
        kind = filesystem_type(d)
        if kind in SHARED_FS:
            refused.append(f"{d} ({kind})")
            continue
        return Path(d)
    how = f"{LOCK_DIR_ENV}={explicit}" if explicit else "the default GPU lock folders"
    raise LockDirError(
        f"{how}: on a filesystem shared between hosts ({', '.join(refused)}); GPU locks must "
        f"be node-local: set {LOCK_DIR_ENV} to a folder on this host's own disk or tmpfs"
    )


def lock_name(uuid: str) -> str:
    """<host>-<GPU UUID>.lock: unique per node even where two hosts share the folder."""
    host = re.sub(r"[^A-Za-z0-9_.-]+", "_", socket.gethostname()) or "localhost"
    return f"{host}-{uuid}.lock"


def _open(locks: Path, uuid: str, kind: str = "lock"):
    """The open file of one of a GPU's locks (``kind``: lock, queue or seat-<k>)."""
    name = lock_name(uuid)
    if kind != "lock":
        name = name.removesuffix(".lock") + f".{kind}"
    return open(Path(locks) / name, "a+")  # noqa: SIM115 - the lock lasts while it is open


def _try(f, shared: bool) -> bool:
    """Lock ``f`` now (shared or exclusive), or False where another holder stops it."""
    try:
        fcntl.flock(f, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _say_holder(f) -> None:
    """Who holds a GPU exclusive, for a person looking (shared holders are many)."""
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()} {' '.join(sys.argv)}\n")
    f.flush()


def _try_shared(locks: Path, uuid: str, f=None):
    """The GPU's lock taken shared now (on ``f`` where given), or None: held exclusive, or
    a job waits at its turnstile to hold it exclusive."""
    q = _open(locks, uuid, "queue")
    try:
        if not _try(q, shared=True):
            return None  # a timer waits: it goes first
        lock = f if f is not None else _open(locks, uuid)
        if _try(lock, shared=True):
            return lock
        if f is None:
            lock.close()
        return None
    finally:
        q.close()


def take_lock(locks: Path, uuids, shared: bool = False):
    """(index, open lock file) of a GPU of ``uuids`` whose lock in ``locks`` can be had now,
    exclusive (a job that times or profiles) or ``shared`` (a job that only checks: many at
    once, none beside an exclusive holder, none while a job waits to hold it exclusive);
    None when none can. The lock lasts as long as the file stays open (the process's life)."""
    return wait_lock(locks, uuids, shared, 0.0)


def load(locks: Path, uuid: str) -> int:
    """How many jobs hold a seat on the GPU."""
    held = 0
    for k in range(SEATS):
        f = _open(locks, uuid, f"seat-{k}")
        try:
            if _try(f, shared=False):
                fcntl.flock(f, fcntl.LOCK_UN)
            else:
                held += 1
        finally:
            f.close()
    return held


def take_seat(locks: Path, uuid: str):
    """A seat on the GPU (an open file, held while it stays open), or None: all taken."""
    for k in range(SEATS):
        f = _open(locks, uuid, f"seat-{k}")
        if _try(f, shared=False):
            return f
        f.close()
    return None


def wait_lock(locks: Path, uuids, shared: bool, wait_s: float):
    """(index, open lock file) of a GPU of ``uuids``, waiting up to ``wait_s`` for one; the
    least loaded (seats) first. A job that waits to hold a GPU exclusive holds the turnstile
    of each GPU it can while it waits (new shared takers wait for it there) and lets them
    go once it has one. None when the time is up."""
    locks = Path(locks)
    deadline = time.monotonic() + wait_s
    queued: dict[int, object] = {}  # the turnstiles held, waiting
    order, ordered_at = [], -1.0
    try:
        while True:
            if time.monotonic() - ordered_at > 1.0:  # the seats, counted again each second
                order = sorted(range(len(uuids)), key=lambda i: (load(locks, uuids[i]), i))
                ordered_at = time.monotonic()
            for i in order:
                if shared:
                    f = _try_shared(locks, uuids[i])
                    if f is not None:
                        return i, f
                    continue
                if i not in queued:
                    q = _open(locks, uuids[i], "queue")
                    if not _try(q, shared=False):
                        q.close()  # another job waits there first
                        continue
                    queued[i] = q
                f = _open(locks, uuids[i])
                if _try(f, shared=False):
                    _say_holder(f)
                    return i, f
                f.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(POLL_S)
    finally:
        for q in queued.values():
            q.close()


def relock(f, locks: Path, uuid: str, shared: bool, wait_s: float) -> float | None:
    """Hold the GPU's lock ``f`` (held already, in either mode or unknown) in the other
    mode: let it go, then take it again shared (once no job waits at the turnstile) or
    exclusive (waiting at the turnstile, so that no new shared taker comes first); the
    seconds waited, or None when ``wait_s`` ran out (the lock is then not held)."""
    fcntl.flock(f, fcntl.LOCK_UN)  # a holder never waits: no deadlock between two switching
    began = time.monotonic()
    deadline = began + wait_s
    q = None
    try:
        while True:
            if shared:
                if _try_shared(locks, uuid, f) is not None:
                    return time.monotonic() - began
            else:
                if q is None:
                    q = _open(locks, uuid, "queue")
                    if not _try(q, shared=False):
                        q.close()
                        q = None
                if q is not None and _try(f, shared=False):
                    _say_holder(f)
                    return time.monotonic() - began
            if time.monotonic() > deadline:
                return None
            time.sleep(POLL_S)
    finally:
        if q is not None:
            q.close()
