"""NVML: is there a GPU, which one a job gets, what state it is in while we measure."""

from __future__ import annotations

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
from kernelbook import locks as _locks
from kernelbook.locks import (  # noqa: F401 - the lock folder's API, as it was here
    LOCK_DIR_ENV,
    SHARED_FS,
    LockDirError,
    NoGpu,
    filesystem_type,
    lock_dir,
    lock_name,
    take_lock,
)
from kernelbook.provenance import git_commit

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


@dataclass
class Slot:
    uuid: str
    index: int
    lock: object  # open file holding the lock until the process ends (or release_slot)
    startup_s: float = 0.0  # from the process's import of kernelbook to the lock's request
    wait_s: float = 0.0  # waiting for the lock (another job measuring on the GPU)
    mode: str | None = "exclusive"  # how the lock is held: exclusive, shared, None: unknown
    seat: object = None  # the job's seat on the GPU (kernelbook.locks), held with the lock
    locks: Path | None = None  # the lock folder


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

    ``shared``: a job that checks and does not time (compute-sanitizer; a bench until its
    timing, switch_mode) takes the GPU's lock shared: several such jobs run on one GPU at
    once, and no job that times or profiles (which hold it exclusive) runs beside them.

    Snakemake never sets CUDA_VISIBLE_DEVICES; with --resources gpu=N it only limits how many
    GPU jobs run at once. Each job takes the lock of one GPU's UUID (the least loaded GPU
    first, kernelbook.locks), so timers never share a GPU and jobs spread over the GPUs.
    Must run before CUDA is initialised in this process.

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
    got = _locks.wait_lock(locks, info.uuids, shared, wait_s)
    if got is None:
        raise NoGpu(f"every visible GPU stayed locked for {wait_s:.0f} s ({locks})")
    i, f = got
    uuid = info.uuids[i]
    os.environ["CUDA_VISIBLE_DEVICES"] = uuid
    now = time.monotonic()
    hold_begins(uuid, shared)
    mode = "shared" if shared else "exclusive"
    seat = _locks.take_seat(locks, uuid)
    return Slot(uuid, i, f, asked - kernelbook.STARTED, now - asked, mode, seat, locks)


def switch_mode(slot: Slot, shared: bool, wait_s: float = 3600.0) -> float:
    """Hold the slot's GPU shared (a bench's checks and set-up: beside other checkers) or
    exclusive (its timing: alone), on the same GPU; the seconds waited. Each mode's span is
    a line of the ledger of its own. Nothing where a parent holds the lock (SLOT_HELD_ENV)
    or it is held so already."""
    want = "shared" if shared else "exclusive"
    if slot.lock is None or slot.mode == want:
        return 0.0
    hold_ends()
    waited = _locks.relock(slot.lock, slot.locks, slot.uuid, shared, wait_s)
    if waited is None:
        slot.mode = None
        raise NoGpu(f"GPU {slot.uuid} stayed locked for {wait_s:.0f} s ({slot.locks})")
    hold_begins(slot.uuid, shared)
    slot.mode = want
    slot.wait_s += waited
    return waited


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
    if slot.seat is not None:
        slot.seat.close()
        slot.seat = None


def forget_hold() -> None:
    """This process no longer records its hold in the ledger (a forked worker that switches
    the lock's mode writes the lines of its own spans)."""
    global _HOLD
    _HOLD = None


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
