"""NVML: is there a GPU, which one a job gets, what state it is in while we measure."""

from __future__ import annotations

import fcntl
import os
import platform
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import kernelbook
from kernelbook.provenance import git_commit

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
# The model a job must run on: the <gpu> of the results path it writes (set by the rules).
GPU_MODEL_ENV = "KERNELBOOK_GPU_MODEL"

# NVML clock-event ("throttle") reason bits. Idle and the application-clock setting say
# nothing about the measurement; the others mean the clocks were held down.
_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
_BENIGN = 0x1 | 0x2 | 0x100
_THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in _REASONS.items() if mask & bit]


def slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': the <gpu> part of every results path."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@dataclass(frozen=True)
class GpuInfo:
    names: tuple[str, ...]
    uuids: tuple[str, ...]
    driver: str

    @property
    def count(self) -> int:
        return len(self.uuids)

    @property
    def slug(self) -> str:
        return slug(self.names[0])


def _nvml():
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def detect() -> tuple[GpuInfo | None, str]:
    """The CUDA devices this process may use, or None and the reason there are none."""
    try:
        nv = _nvml()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError ...
        return None, f"NVML unavailable ({type(e).__name__}: {e})".replace(" ()", "")
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        uuids = [_text(nv.nvmlDeviceGetUUID(h)) for h in handles]
        names = [_text(nv.nvmlDeviceGetName(h)) for h in handles]
        if visible is not None:
            keep = []
            for tok in filter(None, (t.strip() for t in visible.split(","))):
                if tok.isdigit() and int(tok) < len(uuids):
                    keep.append(int(tok))
                else:
                    keep += [i for i, u in enumerate(uuids) if u.startswith(tok)]
            uuids = [uuids[i] for i in keep]
            names = [names[i] for i in keep]
        if not uuids:
            return None, "NVML found no CUDA device" + (
                f" among CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
            )
        if len(set(names)) > 1:
            return None, (
                f"GPUs of different models are visible ({', '.join(sorted(set(names)))}); "
                "set CUDA_VISIBLE_DEVICES to GPUs of one model"
            )
        return GpuInfo(tuple(names), tuple(uuids), _text(nv.nvmlSystemGetDriverVersion())), ""
    finally:
        nv.nvmlShutdown()


class NoGpu(RuntimeError):
    """No CUDA device can be had for a job that needs one."""


@dataclass
class Slot:
    uuid: str
    index: int
    lock: object  # open file holding the lock until the process ends (or release_slot)
    startup_s: float = 0.0  # from the process's import of kernelbook to the lock's request
    wait_s: float = 0.0  # waiting for the lock (another job measuring on the GPU)


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


class LockDirError(NoGpu):
    """The GPU lock folder would be shared with other hosts."""


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


def model_matches(model: str, gpu_slug: str) -> bool:
    """Whether a GPU whose slug is ``gpu_slug`` (e.g. nvidia-h100-80gb-hbm3) is of the model
    ``model`` names (h100, nvidia-h100, a100-80gb): every word of the model in the slug."""
    want = slug(model).split("-")
    have = gpu_slug.split("-")
    return bool(want) and all(w in have for w in want)


# Set to "1" by a process that holds a GPU's lock and starts kernelbook jobs to run on it.
SLOT_HELD_ENV = "KERNELBOOK_SLOT_HELD"


def acquire_slot(
    wait_s: float = 3600.0, preload: tuple[str, ...] = ("cupy", "torch"), shared: bool = False
) -> Slot:
    """Take a GPU no other kernelbook job holds, and make it this process's only device.

    ``shared``: a job that checks and does not time (compute-sanitizer) takes the GPU's lock
    shared: several such jobs run on one GPU at once, and no job that times or profiles
    (which take it exclusive) runs beside them.

    Snakemake never sets CUDA_VISIBLE_DEVICES; with --resources gpu=N it only limits how many
    GPU jobs run at once. Each job takes an exclusive lock on one GPU's UUID, so concurrent
    jobs land on distinct GPUs. Must run before CUDA is initialised in this process.

    The ``preload`` modules are imported before the lock is taken (importing them does not
    initialise CUDA): with more GPU jobs running than GPUs (``--resources gpu=2N`` on N
    GPUs), a job's start-up then overlaps another job's measurement instead of holding the
    GPU idle.

    With $KERNELBOOK_GPU_MODEL set (the rules set it to the <gpu> of the results path a job
    writes), a job handed a GPU of another model fails instead of measuring it: on a cluster
    the scheduler, not this machine, picks the GPU.
    """
    import contextlib
    import importlib

    for name in preload:
        with contextlib.suppress(ImportError):  # the job itself says what is missing
            importlib.import_module(name)
    info, why = detect()
    if info is None:
        raise NoGpu(f"no GPU to run on: {why}")
    model = os.environ.get(GPU_MODEL_ENV, "")
    if model and not model_matches(model, info.slug):
        raise NoGpu(
            f"this job writes results for GPU model '{model}' but got {info.names[0]} "
            f"({info.slug}) on {socket.gethostname()}: ask for that model (gpu_model) or "
            "measure into this one's results"
        )
    if os.environ.get(SLOT_HELD_ENV) == "1":
        # a parent holds this GPU's lock for us (profile and sanitize around their launches,
        # a test that times in its own process): run on its GPU without taking the lock
        held = os.environ.get("CUDA_VISIBLE_DEVICES", info.uuids[0])
        i = info.uuids.index(held) if held in info.uuids else 0
        return Slot(info.uuids[i], i, None, time.monotonic() - kernelbook.STARTED, 0.0)
    locks = lock_dir()
    locks.mkdir(parents=True, exist_ok=True)
    asked = time.monotonic()
    deadline = asked + wait_s
    while True:
        got = take_lock(locks, info.uuids, shared)
        if got is not None:
            i, f = got
            uuid = info.uuids[i]
            os.environ["CUDA_VISIBLE_DEVICES"] = uuid
            now = time.monotonic()
            hold_begins(uuid, shared)
            return Slot(uuid, i, f, asked - kernelbook.STARTED, now - asked)
        if time.monotonic() > deadline:
            raise NoGpu(f"every visible GPU stayed locked for {wait_s:.0f} s ({locks})")
        time.sleep(0.02)


# The GPU ledger: where $KERNELBOOK_GPU_LEDGER names a file, each process that held a GPU's
# lock appends one line when it ends (tab-separated): acquired and released (Unix seconds),
# pid, exclusive or shared, the GPU's UUID, and the job (its verb, study and variant).
# `kernelbook ledger` (kernelbook.ledger) says from it how long a run kept its GPUs busy,
# idle, and with what.
LEDGER_ENV = "KERNELBOOK_GPU_LEDGER"
_HOLD: tuple[str, str, float] | None = None


def hold_begins(uuid: str, shared: bool) -> None:
    global _HOLD
    _HOLD = (uuid, "shared" if shared else "exclusive", time.time())


# The options of the GPU verbs that take no value (the ledger's job label skips the others'
# values along with them)
FLAGS = frozenset({"--record-failure", "--tolerate-failure", "--candidates", "--all", "--exact"})


def job_label(argv) -> str:
    """The job a command line runs, in a few words: its verb, study and variant (options
    and their values left out; --settings carries the whole config), and which of a tuned
    variant's two GPU jobs it is (its candidates, or its winner at the study's sizes), so
    that each job of a run has a label of its own."""
    words, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = "=" not in a and a not in FLAGS
        else:
            words.append(a)
    part = (
        ["candidates"]
        if "--candidates" in argv
        else ["winner"]
        if any(a == "--tuned-table" or a.startswith("--tuned-table=") for a in argv)
        else []
    )
    return " ".join(words[:3] + part)


def hold_ends() -> None:
    """Append this process's hold of a GPU to the ledger (once; nothing where no ledger is
    named or no lock was held), as the process ends (kernelbook.at_exit)."""
    global _HOLD
    path = os.environ.get(LEDGER_ENV)
    if _HOLD is None or not path:
        return
    uuid, mode, began = _HOLD
    _HOLD = None
    label = job_label(sys.argv[1:]).replace("\t", " ")
    line = f"{began:.3f}\t{time.time():.3f}\t{os.getpid()}\t{mode}\t{uuid}\t{label}\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one short write: appends do not interleave
        finally:
            os.close(fd)
    except OSError:
        pass  # the ledger is a record of the run, never a reason for a job to fail


kernelbook.at_exit(hold_ends)


def release_slot(slot: Slot) -> None:
    """Give the GPU's lock back before the process ends: once a job's GPU work is over (its
    timer waited for its stream, its memory freed), writing its tables and the process's
    exit (the CUDA context's teardown) need not hold the next job back. Never after a crash
    or a hang: a hung kernel may run until the process's context is gone, so such a job
    keeps the lock to its end. Nothing where a parent holds the lock (SLOT_HELD_ENV)."""
    if slot.lock is None:
        return
    hold_ends()
    slot.lock.close()  # the flock goes with its file
    slot.lock = None


def take_lock(locks: Path, uuids, shared: bool = False):
    """(index, open lock file) of the first of ``uuids`` whose lock in ``locks`` can be had
    now, exclusive (a job that times or profiles) or ``shared`` (a job that only checks:
    many at once, none beside an exclusive holder); None when none can. The lock lasts as
    long as the file stays open (the process's life)."""
    for i, uuid in enumerate(uuids):
        f = open(Path(locks) / lock_name(uuid), "a+")  # noqa: SIM115 - held for the process
        try:
            fcntl.flock(f, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        if not shared:  # who holds it, for a person looking (shared holders are many)
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()} {' '.join(sys.argv)}\n")
            f.flush()
        return i, f
    return None


class Sampler:
    """Samples one GPU's clocks, temperature, power and throttle reasons in a thread."""

    def __init__(self, uuid: str, period_s: float = 0.02):
        self.nv = _nvml()
        self.handle = self.nv.nvmlDeviceGetHandleByUUID(
            uuid.encode() if isinstance(uuid, str) else uuid
        )
        self.period = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples: list[tuple[float, float, float, float, int]] = []
        self.stamps: list[float] = []  # time.monotonic() of each reading

    def _read(self):
        nv, h = self.nv, self.handle
        sm = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        mem = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        temp = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
        get_reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return (float(sm), float(mem), float(temp), float(power), int(get_reasons(h)))

    def _stamped(self):
        reading = self._read()
        return reading, time.monotonic()

    def _add(self):
        reading, stamp = self._stamped()
        self.samples.append(reading)
        self.stamps.append(stamp)

    def _run(self):
        while not self._stop.is_set():
            self._add()
            self._stop.wait(self.period)

    def __enter__(self):
        self.samples, self.stamps = [], []
        self._add()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._add()

    def sm_clock_at(self, times) -> list[float | None]:
        """The SM clock of the last reading at or before each of ``times`` (monotonic s)."""
        import bisect

        out = []
        for t in times:
            i = bisect.bisect_right(self.stamps, t) - 1
            out.append(self.samples[max(i, 0)][0] if self.samples else None)
        return out

    def summary(self) -> dict:
        import statistics

        sm = [s[0] for s in self.samples]
        mask = 0
        for s in self.samples:
            mask |= s[4]
        mask &= ~_BENIGN
        return {
            "sm_clock_mhz": statistics.median(sm),
            "sm_clock_min_mhz": min(sm),
            "mem_clock_mhz": statistics.median(s[1] for s in self.samples),
            "temperature_c": max(s[2] for s in self.samples),
            "power_w": statistics.fmean(s[3] for s in self.samples),
            "throttle_reasons": "|".join(reason_names(mask)),
            "throttled": bool(mask & _THROTTLING),
        }

    def close(self):
        self.nv.nvmlShutdown()


def device_facts(uuid: str) -> dict:
    """What NVML says about one GPU: name, driver, clocks, memory, power limit, bus."""
    nv = _nvml()
    try:
        h = nv.nvmlDeviceGetHandleByUUID(uuid.encode())
        facts = {
            "gpu_name": _text(nv.nvmlDeviceGetName(h)),
            "gpu_uuid": _text(nv.nvmlDeviceGetUUID(h)),
            "driver_version": _text(nv.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": _cuda_version_text(nv.nvmlSystemGetCudaDriverVersion_v2()),
            "sm_clock_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_clock_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
            "memory_total_bytes": nv.nvmlDeviceGetMemoryInfo(h).total,
            "power_limit_w": nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            "memory_bus_width_bits": nv.nvmlDeviceGetMemoryBusWidth(h),
            "pci_bus_id": _text(nv.nvmlDeviceGetPciInfo(h).busId),
        }
        return facts
    finally:
        nv.nvmlShutdown()


def cuda_provenance(uuid: str) -> dict:
    """Which GPU, driver and CUDA runtime a measurement ran on (CUDA must be usable)."""
    import cupy as cp

    facts = device_facts(uuid)
    rt = cp.cuda.runtime.runtimeGetVersion()
    return {
        "gpu_name": facts["gpu_name"],
        "gpu_uuid": facts["gpu_uuid"],
        "driver_version": facts["driver_version"],
        "cuda_version": f"{rt // 1000}.{(rt % 1000) // 10}",
        "cuda_driver_version": facts["cuda_driver_version"],
    }


def _cuda_version_text(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def host_cpu() -> str:
    """The host's CPU model and its logical CPUs (/proc/cpuinfo's first model name), e.g.
    "Intel(R) Xeon(R) Platinum 8480+, 16 logical CPUs": what host-timed rows (a call's cost
    to its caller) and the device table's launch overheads depend on beside the GPU."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = " ".join(value.split())
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    return f"{model}, {os.cpu_count() or 1} logical CPUs"


def host_provenance(root: Path) -> dict:
    return {
        "git_commit": git_commit(root),
        "hostname": socket.gethostname(),
        "host_cpu": host_cpu(),
        "kernelbook_version": kernelbook.__version__,
    }
