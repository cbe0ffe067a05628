"""Exploration, not a study: what one timed sample costs the host, and where it goes.

kernelbook.measure.timing takes a study's samples one at a time: the blocking kernel, the L2
flush, the call, two events, a wait, and, on CUPTI kernel time, a forced flush of CUPTI's
activity buffers and the matching of the records to the call's tag. On a few-microsecond
kernel the GPU's part is ~50 us; everything else is host time, and a measurement that stops
on its time limit takes fewer samples the more each costs. This times 300 samples of a
one-warp kernel (CuPy, launched through the driver API) and of a torch op (runtime API) on
the library's Timer, in the modes named on the command line, each in a process of its own
(CUPTI's activity kinds are the process's):

    tools/offline/gpu-host.sh python3 tools/explore/timer_sample_cost.py events cupti ...

Modes (joined by '+'): events (no CUPTI), cupti (one timed launch, its records collected alone),
measure (the library's whole loop, Timer.measure, 4 functions a round, in batches of rounds
behind one blocking kernel; with events: on events; with round1: one round a batch; with
apiquiet: every API call's record but the event polls, not the launches' only), and on top
of cupti:
sleepy (poll the end event with sleeps from the start instead of spinning 0.5 ms), round
(flush CUPTI once every 4 samples, as once a round of 4 functions), buf16 and buf4m (16 KiB
or 4 MiB activity buffers instead of cupti.BUFFER_BYTES), window (API activity enabled only
while a call is tagged).
"""

import contextlib
import subprocess
import sys
import time


def run(mode: str) -> None:
    import cupy as cp
    import torch

    from kernelbook.launch import kernel as lk
    from kernelbook.measure import cupti as kc
    from kernelbook.measure import timing as tm

    parts = set(mode.split("+"))
    if "apiquiet" in parts:  # every API call's record but the event polls (fab5edd's rule)
        import os

        os.environ[kc.API_ENV] = "quiet"
    if "buf16" in parts:
        kc.BUFFER_BYTES = 16 * 1024
    if "buf4m" in parts:
        kc.BUFFER_BYTES = 4 * 1024 * 1024
    if "sleepy" in parts:

        def wait_event(event, timeout_s, what, limit_name, spin=False):
            start = time.monotonic()
            while True:
                status = lk.event_status(event)
                if status == lk.CUDA_SUCCESS:
                    return
                if status != lk.CUDA_ERROR_NOT_READY or time.monotonic() - start > timeout_s:
                    raise RuntimeError(f"{what}: status {status}")
                time.sleep(2e-5)

        tm.wait_event = wait_event
    if "window" in parts:
        push, pop = kc.Clock.push, kc.Clock.pop

        def windowed_push(self, tag):
            self._c.activity_enable(self._c.ActivityKind.DRIVER)
            self._c.activity_enable(self._c.ActivityKind.RUNTIME)
            push(self, tag)

        def windowed_pop(self):
            pop(self)
            self._c.activity_disable(self._c.ActivityKind.DRIVER)
            self._c.activity_disable(self._c.ActivityKind.RUNTIME)

        kc.Clock.push, kc.Clock.pop = windowed_push, windowed_pop
    tagged = "events" not in parts
    every = 4 if "round" in parts else 1
    policy = {"cache": "cold", "method": "events", "warmup": 3, "min_samples": 10,
              "max_samples": 5000, "target_rse": 0.005, "min_time_s": 0.1, "max_time_s": 15,
              "launch_timeout_s": 60}  # fmt: skip
    l2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    a = cp.zeros(1024, dtype=cp.float32)
    k = cp.RawKernel(r'extern "C" __global__ void f(float* a) { a[threadIdx.x] += 1.0f; }', "f")
    ta = torch.zeros(1024, device="cuda")
    stream = torch.cuda.ExternalStream(cp.cuda.get_current_stream().ptr)

    def torch_op():
        with torch.cuda.stream(stream):
            ta.add_(1.0)

    for name, fn in (("cupy", lambda: k((1,), (32,), (a,))), ("torch", torch_op)):
        t = tm.Timer(policy, l2, cp.cuda.get_current_stream(), kernel_clock=tagged)
        if "measure" in parts:  # the timer's own loop: 4 functions a round, 300 rounds
            t.policy = {**policy, "min_samples": 300, "max_samples": 300}
            if "round1" in parts:
                t.batch_ms = 0.0
            t.rule = tm.stopping.Rule.of(t.policy)
            r0 = t.clock.records if t.clock else 0
            t0 = time.perf_counter()
            stats = t.measure({f"{name}{i}": fn for i in range(4)}, "measure")
            n = sum(st.n for st in stats.values())
            dt = (time.perf_counter() - t0) / n
            kind = {st.method for st in stats.values()}
            recs = f", {(t.clock.records - r0) / n:.1f} records a sample" if t.clock else ""
            print(f"{mode} {name}: {dt * 1e3:.3f} ms a sample (Timer.measure, {kind}{recs})")
            t.close()
            continue
        c, spent, calls, got = t.clock, [0.0], [0], {}
        if c is not None:
            collect = c.collect

            def sparse_collect(collect=collect, calls=calls, spent=spent, got=got):
                calls[0] += 1
                if calls[0] % every:
                    return {}
                t0 = time.perf_counter()
                out = collect()
                spent[0] += time.perf_counter() - t0
                got.update(out)
                return out

            c.collect = sparse_collect

        def sample(what, t=t, c=c, fn=fn):  # one timed launch and, on CUPTI, its collection
            tag = c.next_tag() if tagged else None
            t._launch(fn, what, True, tag)
            if tag is not None:
                c.collect()

        with contextlib.nullcontext() if c is None else c.recording():
            for _ in range(20):
                sample("warm-up")
            n, r0 = 300, c.records if c else 0
            spent[0] = 0.0
            got.clear()
            t0 = time.perf_counter()
            for _ in range(n):
                sample("sample")
            dt = (time.perf_counter() - t0) / n
        if c is not None:
            c.collect = collect
            detail = (f"{spent[0] / n * 1e3:.3f} in collect, {(c.records - r0) / n:.1f} CUPTI "
                      f"records a sample, kernels found for {len(got)} of {n}")  # fmt: skip
        else:
            detail = "events only"
        print(f"{mode} {name}: {dt * 1e3:.3f} ms a sample ({detail})", flush=True)
        t.close()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        run(sys.argv[2])
    else:
        for m in sys.argv[1:] or ["events", "cupti"]:
            subprocess.run([sys.executable, __file__, "--one", m], check=False)
