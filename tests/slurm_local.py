"""A one-node SLURM cluster on this machine, for tests: munged, slurmctld and slurmd of
Debian's slurm-wlm (22.05), every file of theirs under one temporary folder.

Nothing outside that folder is touched: the daemons get their key, config, sockets, spool,
state and logs from it, listen on free ports, and the clients find the cluster through
SLURM_CONF (``LocalSlurm.env``). Needs root (slurmd runs jobs as their submitting user, and
munged's key must belong to the user it runs as).

Each pytest-xdist worker starts a cluster of its own (its own folder, ports and daemons);
what the workers share is the machine: ``install()`` runs apt-get in one process at a time
(a file lock under /tmp, taken by every worker and every pytest run on the machine; the
others wait, then find the tools installed), and ``start()`` picks its ports and starts its
daemons under another, so that no two clusters pick the same free port.

No slurmdbd: accounting is off, so ``sacct`` answers nothing; the executor plugin polls
``squeue`` instead, which sees finished jobs for MinJobAge seconds (set long here). Every
finished job is also written by jobcomp/filetxt to ``jobcomp.txt``, one line of key=value
pairs per job (JobId, Name, State, NodeList, ...), the record tests read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd", "unshare")
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol")
NODE_MEMORY_MB = 65536


class SlurmError(RuntimeError):
    """The local cluster could not be installed or started; the message says why."""


def missing_tools() -> list[str]:
    return [t for t in (*DAEMONS, *CLIENTS) if shutil.which(t) is None]


# Node-local locks, one per machine like apt's own (not under pytest's basetemp, which is one
# per pytest run): one for the apt-get install, one for picking ports and starting daemons.
INSTALL_LOCK = Path("/tmp/kernelbook-slurm-install.lock")
START_LOCK = Path("/tmp/kernelbook-slurm-start.lock")
# apt-get install waits up to this long for dpkg's locks (DPkg::Lock::Timeout). apt-get update
# does not wait for its lists lock at all (apt 2.6: "Could not get lock /var/lib/apt/lists/lock",
# exit 100, at once, whatever DPkg::Lock::Timeout says), so a command refused for a lock that
# an apt-get outside these tests holds is run again, until the same deadline.
APT_LOCK_TIMEOUT = 300
APT_OPTIONS = ("-o", f"DPkg::Lock::Timeout={APT_LOCK_TIMEOUT}", "-o", "Acquire::Retries=3")
APT_LOCKED = re.compile(r"Could not get lock|Unable to lock|Unable to acquire the dpkg")


@contextlib.contextmanager
def machine_lock(path: Path, timeout: float, what: str):
    """Hold an exclusive flock on ``path``, waiting up to ``timeout`` s for its holder."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SlurmError(
                        f"{what}: {path} still locked by another process after {timeout:.0f} s"
                    ) from None
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)  # releases the lock


def apt_get(*args: str, timeout: float = APT_LOCK_TIMEOUT * 2) -> None:
    """``apt-get -o DPkg::Lock::Timeout=... ARGS``, again while apt's locks are held."""
    cmd = ["apt-get", *APT_OPTIONS, *args]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{' '.join(cmd)} did not finish in {timeout:.0f} s") from None
        if p.returncode == 0:
            return
        if APT_LOCKED.search(p.stderr) and deadline - time.monotonic() > 5:
            time.sleep(5)  # another apt-get or dpkg is at work on this machine
            continue
        raise SlurmError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")


def install(timeout: float = 900) -> None:
    """apt-get the daemons and clients if any is missing (root, Debian), once per machine:
    concurrent callers (xdist workers, other pytest runs) wait for the one installing."""
    if not missing_tools():
        return
    if shutil.which("apt-get") is None:
        raise SlurmError(f"no apt-get to install {' '.join(PACKAGES)}")
    with machine_lock(INSTALL_LOCK, timeout, f"installing {' '.join(PACKAGES)}"):
        if not missing_tools():
            return  # installed while this process waited for the lock
        apt_get("update", "-qq")
        apt_get("install", "-y", "-qq", "--no-install-recommends", *PACKAGES)
    if missing_tools():
        raise SlurmError(f"still missing after apt-get install: {' '.join(missing_tools())}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free now (each socket is held until all are picked)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("", 0))  # the daemons listen on every address
        return [s.getsockname()[1] for s in socks]


def node_line(name: str) -> str:
    """The NodeName line of this machine as slurmd detects it (CPUs, sockets, memory)."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=60).stdout
    first = next((line for line in out.splitlines() if line.startswith("NodeName=")), "")
    if not first:
        raise SlurmError(f"slurmd -C printed no NodeName line:\n{out}")
    fields = dict(kv.split("=", 1) for kv in first.split())
    fields["NodeName"] = name
    fields["NodeAddr"] = "127.0.0.1"
    # Memory is not enforced here (no cgroups); offer at least NODE_MEMORY_MB so that the
    # profile's requests (16 GB for a GPU job) fit on a small test machine too
    # (SlurmdParameters=config_overrides keeps such a node from being drained).
    fields["RealMemory"] = str(max(int(fields.get("RealMemory", "0")), NODE_MEMORY_MB))
    return " ".join(f"{k}={v}" for k, v in fields.items())


class LocalSlurm:
    """munged + slurmctld + slurmd under ``root``; ``start()``, then ``stop()``."""

    def __init__(self, root: Path, partition: str = "debug", min_job_age: int = 3600):
        self.root = Path(root)
        self.partition = partition
        self.name = socket.gethostname().split(".")[0]
        self.min_job_age = min_job_age
        self.conf = self.root / "etc" / "slurm.conf"
        self.jobcomp = self.root / "jobcomp.txt"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, snakemake's plugin) needs to find this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- configuration
    def write_config(self) -> None:
        r = self.root
        for d in ("etc", "munge", "state", "spool", "log"):
            (r / d).mkdir(parents=True, exist_ok=True)
        (r / "munge").chmod(0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        node = node_line(self.name)
        ctld_port, slurmd_port = free_ports(2)
        self.conf.write_text(
            f"""\
# one-node test cluster (tests/slurm_local.py)
ClusterName=kbtest
SlurmctldHost={self.name}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/slurmd-%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmdParameters=config_overrides
MailProg=/bin/true
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
MinJobAge={self.min_job_age}
ReturnToService=2
SchedulerType=sched/backfill
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
{node} State=UNKNOWN
PartitionName={self.partition} Nodes={self.name} Default=YES MaxTime=INFINITE State=UP
"""
        )

    # -- daemons
    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")  # noqa: SIM115 - closed by the child
        self.procs[name] = subprocess.Popen(
            cmd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SlurmError(f"{name} exited ({p.returncode}) {self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise SlurmError(f"{what} not ready after {timeout:.0f} s {self.logs()}")

    def start(self, timeout: float = 60) -> LocalSlurm:
        # Ports are picked free and bound only when the daemons listen: another cluster on
        # this machine (the next xdist worker's) picks its own once this one's are taken.
        with machine_lock(START_LOCK, 4 * timeout, "starting the local SLURM"):
            self._start(timeout)
        return self

    def _start(self, timeout: float) -> None:
        self.write_config()
        r = self.root
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={r}/munge/munge.key",
                f"--pid-file={r}/munge/munged.pid",
                f"--log-file={r}/log/munged.log",
                f"--seed-file={r}/munge/munged.seed",
            ],
        )
        self._wait("munged", self.munge_socket.exists, timeout)
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-i", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self.run("scontrol", "ping").returncode == 0, timeout)
        # Jobs find the cluster through /etc/slurm/slurm.conf, as on any node: the executor's
        # job step drops SLURM_* variables (SLURM_CONF too) before it calls srun. slurmd and
        # its jobs get a mount namespace of their own in which this folder is /etc/slurm;
        # the machine's /etc/slurm stays as it is.
        etc = self.conf.parent
        self._spawn(
            "slurmd",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"mkdir -p /etc/slurm && mount --bind {etc} /etc/slurm && "
                f"exec slurmd -D -f /etc/slurm/slurm.conf -N {self.name}",
            ],
        )
        self._wait("the node", lambda: self.node_state() == "idle", timeout)

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            p = self.procs.pop(name)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=20)

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients
    def run(self, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)

    def node_state(self) -> str:
        p = self.run("sinfo", "--noheader", "--nodes", self.name, "--format=%T")
        return p.stdout.strip() if p.returncode == 0 else ""

    def logs(self) -> str:
        parts = []
        for f in sorted((self.root / "log").glob("*")):
            text = f.read_text(errors="replace")[-3000:]
            parts.append(f"--- {f.name} ---\n{text}")
        return "\n" + "\n".join(parts)

    def jobcomp_records(self) -> list[dict[str, str]]:
        """One dict per finished job, as jobcomp/filetxt wrote it."""
        if not self.jobcomp.exists():
            return []
        out = []
        for line in self.jobcomp.read_text().splitlines():
            rec = {}
            for kv in line.split():
                k, sep, v = kv.partition("=")
                if sep:
                    rec[k] = v
            if rec:
                out.append(rec)
        return out

    def show_job(self, jobid: str) -> dict[str, str]:
        """``scontrol show job`` of one job, as key=value pairs (kept MinJobAge seconds)."""
        p = self.run("scontrol", "show", "job", "--oneliner", jobid)
        if p.returncode != 0:
            return {}
        rec = {}
        for kv in p.stdout.split():
            k, sep, v = kv.partition("=")
            if sep:
                rec[k] = v
        return rec
