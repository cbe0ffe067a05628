#!/usr/bin/env python3
"""Quick GPU check of the hgemm ladder's steps 01-05, without the study's problem module.

For each kernel of config/studies/hgemm.yaml (steps 01-05) (05 at a few tuning points): nvcc
-cubin for sm_90 with its defines, load it with CuPy, run it on seeded random BF16 inputs and
compare C = A * B^T with a float64 torch reference, then time it and cuBLAS
(torch.matmul(A, B.t()), BF16) with CUDA events over --iters launches.

Tolerance (per element): |C - ref| <= 2^-8 |ref| + 2^-16 (|A| |B|^T): the first term covers
rounding the FP32 result to BF16 (half an ulp is 2^-9 relative), the second FP32 accumulation
over K (typical error ~sqrt(K) 2^-24 times the scale of the products, far below it). A layout or
indexing bug gives errors of the order of |ref| itself. C is prefilled with NaN, so an element a
kernel fails to write fails the check.

    python3 tools/dev/hgemm_steps_check.py                 # 512^3, 1000^3, 4095x4097x1000, 4096^3
    python3 tools/dev/hgemm_steps_check.py --tune          # + every 05 candidate at 4096^3
    python3 tools/dev/hgemm_steps_check.py --only 05_cp_async --size 8192x8192x8192
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
STEPS = ROOT / "config" / "studies" / "hgemm.yaml"
SIZES = ["512x512x512", "1000x1000x1000", "4095x4097x1000", "4096x4096x4096"]
# 05 without --tune: the kernel's default point and the 4-warp 2-blocks/SM point
POINTS_05 = [
    {"BM": 128, "BN": 256, "BK": 32, "WM": 64, "WN": 64, "STAGES": 4, "MIN_BLOCKS": 1},
    {"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 64, "STAGES": 4, "MIN_BLOCKS": 2},
]


def cdiv(a, b):
    return -(-a // b)


def ev(text, env):
    """A config expression (cdiv, //, *, +, comparisons, and/or) over env."""
    if isinstance(text, int | float | bool):
        return text
    return eval(str(text), {"__builtins__": {}, "cdiv": cdiv, "min": min, "max": max}, dict(env))


def variants(tune: bool) -> list[dict]:
    out = []
    for raw in [v for v in yaml.safe_load(STEPS.read_text())["variants"] if v["id"][:2] <= "05"]:
        t = raw.get("tune")
        if not t:
            points = [{}]
        elif tune:
            space = t["space"]
            points = [dict(zip(space, c, strict=True)) for c in itertools.product(*space.values())]
        else:
            points = POINTS_05
        for p in points:
            d = dict(p)
            for k, v in raw.get("defines", {}).items():
                d[k] = ev(v, d) if isinstance(v, str) else v
            if t and not all(ev(c, d) for c in t["constraints"]):
                continue
            tag = ",".join(f"{k}{v}" for k, v in p.items())
            name = raw["id"] + (f"[{tag}]" if p else "")
            out.append({**raw, "name": name, "defines_resolved": d})
    return out


def allow_dynamic_smem(cp, kernel, nbytes: int) -> None:
    """More than 48 KiB of dynamic shared memory (CuPy RawKernel; older CuPy: a Function)."""
    if hasattr(kernel, "max_dynamic_shared_size_bytes"):
        kernel.max_dynamic_shared_size_bytes = nbytes
    else:
        cp.cuda.driver.funcSetAttribute(
            kernel.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes
        )


def compile_all(vs, nvcc: str, outdir: Path, jobs: int):
    def one(v):
        cubin = outdir / (v["name"].replace("[", "_").replace("]", "").replace(",", "_") + ".cubin")
        cmd = [
            nvcc,
            "-cubin",
            "-gencode=arch=compute_90,code=sm_90",
            "-O3",
            "-lineinfo",
            "-Xptxas",
            "-v",
            *[f"-D{k}={x}" for k, x in v["defines_resolved"].items()],
            "-o",
            str(cubin),
            str(ROOT / "kernels" / "hgemm" / f"{v['id']}.cu"),
        ]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{v['name']}: nvcc failed:\n{p.stderr}\n{' '.join(cmd)}")
        regs = [ln for ln in p.stderr.splitlines() if "Used" in ln]
        v["cubin"], v["ptxas"] = cubin, (regs[-1].split(":", 1)[-1].strip() if regs else "")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, vs))


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size", action="append", help="MxNxK, repeatable")
    ap.add_argument("--only", action="append", help="step id(s) to run, e.g. 05_cp_async")
    ap.add_argument("--tune", action="store_true", help="all 05 candidates")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    ap.add_argument(
        "--time-max",
        type=int,
        default=4096**3,
        help="time only sizes with M*N*K <= this (correctness is checked at all)",
    )
    args = ap.parse_args()

    import cupy as cp
    import torch

    sizes = [tuple(int(x) for x in s.split("x")) for s in (args.size or SIZES)]
    vs = [v for v in variants(args.tune) if not args.only or v["id"] in args.only]
    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="hgemm-steps-"))
    compile_all(vs, args.nvcc, tmp, jobs=min(16, os.cpu_count() or 2))
    print(
        f"compiled {len(vs)} kernels in {time.time() - t0:.1f} s "
        f"({torch.cuda.get_device_name()}, torch {torch.__version__}, cupy {cp.__version__})"
    )
    for v in vs:
        print(f"  {v['name']:<60} {v['ptxas']}")
        mod = cp.RawModule(path=str(v["cubin"]))
        v["fn"] = mod.get_function(v["entry"])
        v["mod"] = mod

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    print(
        "cuBLAS baseline: torch.matmul(A, B.t()) in BF16, "
        f"allow_bf16_reduced_precision_reduction="
        f"{torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}"
    )
    failures = 0
    torch.cuda.synchronize()
    for M, N, K in sizes:
        g = torch.Generator(device="cuda").manual_seed(1234 + M + N + K)
        A = torch.randn(M, K, device="cuda", dtype=torch.float32, generator=g).to(torch.bfloat16)
        B = torch.randn(N, K, device="cuda", dtype=torch.float32, generator=g).to(torch.bfloat16)
        ref = A.double() @ B.double().t()
        tol = (2.0**-8) * ref.abs() + (2.0**-16) * (A.double().abs() @ B.double().abs().t())
        flop = 2.0 * M * N * K
        timed = args.time_max >= M * N * K

        def bench(launch):
            for _ in range(3):
                launch()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            s.record()
            for _ in range(args.iters):
                launch()
            e.record()
            torch.cuda.synchronize()
            return s.elapsed_time(e) / args.iters * 1e-3

        Cb = torch.matmul(A, B.t())
        err_cublas = (Cb.double() - ref).abs().max().item()
        t_cublas = bench(lambda A=A, B=B: torch.matmul(A, B.t())) if timed else math.nan
        print(
            f"\n== {M}x{N}x{K}: cuBLAS {flop / t_cublas * 1e-12:7.1f} TFLOP/s, "
            f"max |err| {err_cublas:.3g}"
        )
        C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        for v in vs:
            env = {**v["defines_resolved"], "M": M, "N": N, "K": K}
            unmet = [r for r in v.get("requires", []) if not ev(r, env)]
            if unmet:
                print(f"  {v['name']:<60} skipped: requires {', '.join(unmet)}")
                continue
            grid = tuple(int(ev(x, env)) for x in v["grid"]) + (1,) * (3 - len(v["grid"]))
            block = tuple(int(ev(x, env)) for x in v["block"]) + (1,) * (3 - len(v["block"]))
            smem = int(ev(v.get("smem", 0), env))
            fn = v["fn"]
            if smem > 48 * 1024:
                allow_dynamic_smem(cp, fn, smem)
            params = (
                np.int32(M),
                np.int32(N),
                np.int32(K),
                np.uint64(A.data_ptr()),
                np.uint64(B.data_ptr()),
                np.uint64(C.data_ptr()),
            )

            # CuPy launches on its current stream: make it torch's, so events and order agree
            stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

            def launch(fn=fn, grid=grid, block=block, smem=smem, params=params, stream=stream):
                with stream:
                    fn(grid, block, params, shared_mem=smem)

            C.fill_(float("nan"))
            launch()
            torch.cuda.synchronize()
            diff = (C.double() - ref).abs()
            bad = ~(diff <= tol)  # NaN counts as bad
            nbad = int(bad.sum().item())
            ok = nbad == 0
            failures += not ok
            maxerr = diff.nan_to_num(float("inf")).max().item()
            line = f"  {v['name']:<60} {'ok  ' if ok else 'FAIL'} max |err| {maxerr:.3g}"
            if not ok:
                i = int(bad.flatten().nonzero()[0].item())
                line += (
                    f" ({nbad} bad; first at row {i // N} col {i % N}: "
                    f"{C.flatten()[i].item()} vs {ref.flatten()[i].item():.4g})"
                )
            if timed:
                t = bench(launch)
                line += (
                    f"  {flop / t * 1e-12:7.1f} TFLOP/s  {100 * t_cublas / t:5.1f} % of cuBLAS"
                    f"  ({t * 1e3:.3f} ms)"
                )
            print(line, flush=True)
        torch.cuda.empty_cache()
    print(f"\n{'all correct' if not failures else f'{failures} FAILED'} ({time.time() - t0:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
