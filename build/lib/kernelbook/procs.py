"""External tools (nvcc, ncu, compute-sanitizer, the `kernelbook launch` they drive) run
with a time limit, in their own session: on timeout the whole process group is killed, so
a hung kernel under ncu cannot outlive its job through a helper process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

GRACE_S = 5.0  # between SIGTERM and SIGKILL: ncu and the sanitizer get to detach cleanly


class ToolTimeout(RuntimeError):
    """A tool ran past its time limit; its process group was killed."""

    kind = "hang"

    def __init__(self, message: str, tool: str, timeout: float, output: str = ""):
        super().__init__(message)
        self.tool, self.timeout, self.output = tool, timeout, output


def kill_group(pgid: int, grace: float = GRACE_S, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM the group, give it ``grace`` seconds, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        if sig == signal.SIGTERM and leader is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                leader.wait(timeout=grace)


def run_tool(
    cmd: list[str],
    *,
    timeout: float,
    what: str,
    setting: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``cmd`` to completion (text output captured) or kill its process group.

    ``what`` names the tool, study, variant and size for the message; ``setting`` is the
    config key of the limit, so the message says what to raise.
    """
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid, leader=proc)
        try:
            out, err = proc.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:  # a member left the group and holds the pipes
            out, err = "", ""
        tool = os.path.basename(cmd[0])
        raise ToolTimeout(
            f"{what}: {tool} still running after {timeout:g} s ({setting}); its process "
            "group was killed",
            tool,
            timeout,
            (out or "") + (err or ""),
        ) from None
    except BaseException:
        kill_group(proc.pid, grace=0.5, leader=proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
