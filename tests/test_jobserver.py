"""The job server (kernelbook.jobserver): a served job is the job it would be in its own
process (arguments, working directory, environment, streams, exit status), one server
serves many jobs, a crash ends only its job, a client that goes takes its job along, and
the real command line gives the same answer served and not. Real processes, real sockets,
no GPU (the entry points are tests/data/jobserver_entry.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

DATA = REPO / "tests" / "data"
CLIENT = (
    "import sys; from kernelbook import jobserver; "
    "s = jobserver.run(sys.argv[1:], entry='jobserver_entry:main'); "
    "print('unserved' if s is None else '', end=''); sys.exit(3 if s is None else s)"
)


def _env(**extra) -> dict[str, str]:
    env = dict(os.environ)
    # no empty entry: it would put each job's working directory on the path (and so in the
    # server's key)
    path = [str(DATA), str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(path)
    env.update({"KERNELBOOK_JOBSERVER": "1", "KERNELBOOK_JOBSERVER_IDLE_S": "20"}, **extra)
    return env


def _client(*argv: str, cwd: Path, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, *argv],
        cwd=cwd,
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(*argv: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    p = _client(*argv, cwd=cwd, **env)
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _sleeping_job(tmp_path) -> tuple[subprocess.Popen, int]:
    """A client whose served job sleeps, and the job's pid once it runs."""
    pidfile = tmp_path / "pid"
    p = _client("sleep", str(pidfile), cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)
    return p, int(pidfile.read_text())


def _gone(job: int, what: str) -> None:
    deadline = time.monotonic() + 10
    while _alive(job):
        assert time.monotonic() < deadline, f"job {job} outlived {what}"
        time.sleep(0.05)


@pytest.mark.xdist_group("jobserver")
def test_a_served_job_is_the_job_with_its_own_arguments_directory_environment_and_status(
    tmp_path,
):
    a = _run("echo", "3", cwd=tmp_path, KB_TEST_X="first")
    assert a.returncode == 3, a.stderr
    got = json.loads(a.stdout)
    assert got["argv"] == ["echo", "3"] and got["cwd"] == str(tmp_path) and got["x"] == "first"
    assert a.stderr.strip() == "to stderr"  # the job wrote to the client's own streams
    other = tmp_path / "other"
    other.mkdir()
    b = _run("echo", "0", cwd=other, KB_TEST_X="second")
    assert b.returncode == 0
    again = json.loads(b.stdout)
    assert again["cwd"] == str(other) and again["x"] == "second"
    # one server forked both jobs, each a process of its own
    assert again["server"] == got["server"] and again["pid"] != got["pid"]


@pytest.mark.xdist_group("jobserver")
def test_a_served_job_that_held_a_gpu_writes_its_ledger_line(tmp_path):
    """A served job leaves through os._exit, which runs no exit handlers: the child runs the
    library's own (kernelbook.at_exit) first, so the GPU ledger gets the job's hold."""
    ledger = tmp_path / "ledger.tsv"
    r = _run("hold", cwd=tmp_path, KERNELBOOK_GPU_LEDGER=str(ledger))
    assert r.returncode == 0, r.stderr
    line = ledger.read_text().split("\t")
    assert line[3:5] == ["exclusive", "GPU-test"] and line[5].strip() == "hold"


@pytest.mark.xdist_group("jobserver")
def test_a_crash_ends_its_job_alone(tmp_path):
    first = json.loads(_run("echo", cwd=tmp_path).stdout)
    crash = _run("crash", cwd=tmp_path)
    assert crash.returncode == 128 + signal.SIGSEGV
    after = json.loads(_run("echo", cwd=tmp_path).stdout)
    assert after["server"] == first["server"]


@pytest.mark.xdist_group("jobserver")
def test_a_client_that_goes_takes_its_job_along(tmp_path):
    p, job = _sleeping_job(tmp_path)
    assert _alive(job)
    p.kill()  # SIGKILL: no handler runs in the client; the server sees its socket close
    p.wait()
    _gone(job, "its client")


@pytest.mark.xdist_group("jobserver")
def test_a_server_that_goes_takes_its_jobs_along_and_their_clients_fail(tmp_path):
    p, job = _sleeping_job(tmp_path)
    server = int(Path(f"/proc/{job}/stat").read_text().split(")")[-1].split()[1])
    os.kill(server, signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 1 and out == ""  # failed, not run again unserved
    assert "the job server" in err and "went away while it ran `kernelbook sleep" in err
    _gone(job, "its server")


@pytest.mark.xdist_group("jobserver")
def test_a_served_job_asks_no_server_itself_and_off_means_unserved(tmp_path):
    nested = _run("nested", cwd=tmp_path)
    assert nested.returncode == 0, nested.stderr
    assert json.loads(nested.stdout) == {"nested": None}
    off = _run("echo", cwd=tmp_path, KERNELBOOK_JOBSERVER="0")
    assert off.returncode == 3 and off.stdout == "unserved"


@pytest.mark.xdist_group("jobserver")
def test_the_command_line_answers_the_same_served_and_not(tmp_path):
    """A GPU verb without a GPU: the same one error and exit status through the server as
    in a process of its own (the real kernelbook.cli, the real server preloading torch)."""

    def bench(flag: str) -> subprocess.CompletedProcess:
        env = _env(KERNELBOOK_JOBSERVER=flag)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        return subprocess.run(
            [sys.executable, "-m", "kernelbook", "bench", "sgemm", "01_naive"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip

    alone, served = bench("0"), bench("1")
    if alone.returncode == 0:
        pytest.skip("a GPU is here: the bench itself runs")
    assert (served.returncode, served.stdout, served.stderr) == (
        alone.returncode,
        alone.stdout,
        alone.stderr,
    )
    assert "no GPU to run on" in served.stderr
