"""Regimes: five PyTorch ops, each sized by one element count N, bfloat16 in and out.

The ``regimes`` study asks when an op is bound by launch overhead, by memory bandwidth or
by arithmetic, so one problem holds several ops: the problem's own function is the
elementwise ``scale`` and the others are alternatives a variant selects with ``computes:``
(the op is a property of the variant; the size is only N):

========== ======================================= ============== ===== ==============
op         function                                shape from N   FLOP  bytes (min)
========== ======================================= ============== ===== ==============
scale      y = 2.5 x                               x, y: N        N     4 N
chain      y = tanh(1.5 x + 0.5) * x               x, y: N        4 N   4 N
sum        y = sum(x) (one scalar)                 x: N           N     2 N + 2
matmul     C = A @ B                               n x n, n=rnd   2 n^3 6 n^2
                                                   (sqrt N)
layernorm  y = (x - mean) / sqrt(var + eps) w + b  R x H, H=min   8 R H 4 R H + 4 H
           over rows                               (N, hidden),
                                                   R = N // H
========== ======================================= ============== ===== ==============

Every array is bfloat16 (study dtype ``bfloat16``; CuPy has no bfloat16, so the device
arrays are uint16 holding the bits, as in the softmax problem; a torch variant sees them
through a zero-copy view). Arithmetic inside the ops is float32, as PyTorch does for
bfloat16. Inputs are standard normals rounded to bfloat16, except ``sum``'s, uniform in
[0, 1) so the sum does not cancel (a relative error of a sum near zero means nothing). The
float64 reference is computed from the rounded inputs, so it is the exact function of
what the op reads; the tolerance, 1e-2 norm-wise, is the output's own bfloat16 rounding
(2^-9 per element) with margin, and covers an eager chain's bfloat16 intermediates.

FLOP and byte counts (``cost``) are per op and per row of the measurements table: the FLOP
count is the op's arithmetic (tanh counted as one), the bytes are the fewest one call must
move through device memory (each input read once, each output written once). A variant
that moves more (an eager chain writes and reads its intermediates) says how much more in
its ``predict: {traffic: ...}``, which the three-term model of kernelbook.report.prediction uses.

The baseline ``eager`` is the op in plain eager PyTorch into a preallocated output, so an
eager variant is timed against itself (a control: about 100 %) and a compiled or
graph-captured one shows what it gains over eager.
"""

from __future__ import annotations

import dataclasses
import math

from kernelbook.problems.base import (
    GUARD_ELEMENTS,
    Baseline,
    Case,
    GuardedArray,
    Problem,
    rel_err,
    size_seed,
)
from kernelbook.problems.bf16 import bf16_bits, bf16_values, torch_bf16

OPS = ("scale", "chain", "sum", "matmul", "layernorm")
ITEMSIZE = 2  # bfloat16
SCALE = 2.5
CHAIN_A, CHAIN_B = 1.5, 0.5
LN_EPS = 1e-5


def matmul_n(n_elements: int) -> int:
    """The side of the square matmul whose matrices hold about ``n_elements`` each."""
    return max(1, round(math.sqrt(n_elements)))


def layernorm_shape(n_elements: int, hidden: int) -> tuple[int, int]:
    """(rows, hidden) of the layer norm at ``n_elements``: H = min(N, hidden), R = N // H."""
    h = max(1, min(int(n_elements), int(hidden)))
    return int(n_elements) // h, h


@dataclasses.dataclass
class OpCase(Case):
    """A Case that knows which op it holds (the baseline computes that op)."""

    op: str = "scale"
    shape: tuple[int, ...] = ()


class Regimes(Problem):
    name = "regimes"
    size_names = ("N",)
    dtypes = ("bfloat16",)
    baselines = {"eager": "the op in eager PyTorch into a preallocated output"}
    default_params = {"hidden": 1024}
    alternatives = {
        "chain": "y = tanh(1.5 x + 0.5) * x: four elementwise ops",
        "sum": "y = sum(x): a full reduction to one scalar",
        "matmul": "C = A @ B, square n x n with n = round(sqrt(N)), bfloat16",
        "layernorm": "layer norm over rows of H = min(N, hidden) elements, R = N // H rows",
    }
    figure_of_merit = "gbps"

    # ---- cost model (no GPU) ------------------------------------------------------
    def cost(self, sizes, dtype, computes=None, params=None) -> tuple[float, float]:
        """(FLOP, minimal bytes) of one call of the op ``computes`` (None: scale)."""
        op = computes or "scale"
        N = int(sizes["N"])
        hidden = int((params or self.default_params)["hidden"])
        if op == "scale":
            return float(N), float(2 * N * ITEMSIZE)
        if op == "chain":
            return 4.0 * N, float(2 * N * ITEMSIZE)
        if op == "sum":
            return float(N), float((N + 1) * ITEMSIZE)
        if op == "matmul":
            n = matmul_n(N)
            return 2.0 * n**3, float(3 * n * n * ITEMSIZE)
        if op == "layernorm":
            R, H = layernorm_shape(N, hidden)
            return 8.0 * R * H, float((2 * R * H + 2 * H) * ITEMSIZE)
        raise KeyError(f"regimes has no op '{op}' (ops: {', '.join(OPS)})")

    def flops(self, s):
        return self.cost(s, "bfloat16")[0]

    def min_bytes(self, s, dtype):
        return self.cost(s, dtype)[1]

    def tolerance(self, s, dtype):
        return 1e-2

    # ---- device side ---------------------------------------------------------------
    def setup(
        self, sizes, dtype, params, seed, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        import cupy as cp

        op = computes or "scale"
        if op not in OPS:
            raise KeyError(f"regimes has no op '{op}' (ops: {', '.join(OPS)})")
        rng = cp.random.Generator(cp.random.XORWOW(size_seed(seed, {"op": OPS.index(op), **sizes})))
        return self.build_case(cp, sizes, dtype, params, seed, rng, op, guard, reference)

    def build_case(self, xp, sizes, dtype, params, seed, rng, op, guard, reference) -> OpCase:
        """The case of ``op`` at ``sizes`` in array module ``xp`` with generator ``rng``
        (``rng.standard_normal``/``rng.random`` with a float32 dtype)."""
        import numpy as np

        if dtype != "bfloat16":
            raise KeyError(f"regimes has no dtype '{dtype}' (bfloat16 only)")
        N = int(sizes["N"])
        params = {**self.default_params, **(params or {})}

        def draw(shape, uniform=False):
            n = int(np.prod(shape))
            f = (
                rng.random(n, dtype=xp.float32)
                if uniform
                else rng.standard_normal(n, dtype=xp.float32)
            )
            return bf16_bits(xp, f).reshape(shape)

        f64 = lambda bits: bf16_values(xp, bits).astype(xp.float64)  # noqa: E731
        inputs, ref = {}, None
        if op in ("scale", "chain", "sum"):
            shape = (N,)
            x = inputs["x"] = draw(shape, uniform=op == "sum")
            out_n = 1 if op == "sum" else N
            if reference:
                v = f64(x)
                if op == "scale":
                    ref = SCALE * v
                elif op == "chain":
                    ref = xp.tanh(CHAIN_A * v + CHAIN_B) * v
                else:
                    ref = v.sum(keepdims=True)
        elif op == "matmul":
            n = matmul_n(N)
            shape = (n, n)
            inputs["A"], inputs["B"] = draw(shape), draw(shape)
            out_n = n * n
            if reference:
                ref = (f64(inputs["A"]) @ f64(inputs["B"])).ravel()
        else:  # layernorm
            R, H = layernorm_shape(N, params["hidden"])
            shape = (R, H)
            inputs["x"] = draw(shape)
            inputs["w"] = bf16_bits(xp, 1.0 + 0.1 * rng.standard_normal(H, dtype=xp.float32))
            inputs["b"] = bf16_bits(xp, 0.1 * rng.standard_normal(H, dtype=xp.float32))
            out_n = R * H
            if reference:
                v = f64(inputs["x"])
                mean = v.mean(axis=1, keepdims=True)
                var = ((v - mean) ** 2).mean(axis=1, keepdims=True)
                ref = (v - mean) / xp.sqrt(var + LN_EPS) * f64(inputs["w"]) + f64(inputs["b"])
                ref = ref.ravel()
        out_name = "C" if op == "matmul" else "y"
        y = GuardedArray(xp, out_n, "bfloat16", guard)
        case = OpCase(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs=inputs,
            outputs={out_name: y},
            reference={out_name: ref} if reference else {},
            args=(*inputs.values(), y.view),
            op=op,
            shape=shape,
        )
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        self.known_baseline(name)
        op = getattr(case, "op", "scale")
        t = {k: torch_bf16(a) for k, a in case.inputs.items()}
        out_name = next(iter(case.outputs))
        n_out = case.outputs[out_name].view.size
        y = torch.empty(n_out, dtype=torch.bfloat16, device="cuda")
        run = eager(op, t, y, case.shape, params)
        y.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        rel = rel_err(cp, y, case.reference[out_name])
        mode = f"torch {torch.__version__} eager {op}, bfloat16 (float32 math inside)"
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)


def eager(op: str, t: dict, y, shape, params) -> callable:
    """The op in eager PyTorch over bfloat16 tensors ``t`` into ``y`` (flat, preallocated):
    the baseline, and what the eager variants run."""
    import torch
    import torch.nn.functional as F

    params = {**Regimes.default_params, **(params or {})}
    if op == "scale":
        x = t["x"].reshape(-1)

        def run():
            torch.mul(x, SCALE, out=y)

    elif op == "chain":
        x = t["x"].reshape(-1)

        def run():
            a = torch.mul(x, CHAIN_A)
            a = torch.add(a, CHAIN_B)
            a = torch.tanh(a)
            torch.mul(a, x, out=y)

    elif op == "sum":
        x = t["x"].reshape(-1)
        y0 = y.view(())

        def run():
            torch.sum(x, dim=0, out=y0)

    elif op == "matmul":
        A, B = t["A"].view(shape), t["B"].view(shape)
        C = y.view(shape)

        def run():
            torch.matmul(A, B, out=C)

    elif op == "layernorm":
        x, w, b = t["x"].view(shape), t["w"].reshape(-1), t["b"].reshape(-1)
        y2 = y.view(shape)
        H = shape[1]

        def run():
            y2.copy_(F.layer_norm(x, (H,), w, b, LN_EPS))

    else:
        raise KeyError(f"regimes has no op '{op}' (ops: {', '.join(OPS)})")
    return run


def torch_operands(case, op: str):
    """(bfloat16 inputs by name, flat bfloat16 output, op shape) of a torch variant's case
    (``.inputs``/``.outputs`` torch tensors or CuPy arrays sharing the case's memory)."""
    N = int(case.sizes["N"])
    params = {**Regimes.default_params, **(getattr(case, "params", None) or {})}
    if op == "matmul":
        shape = (matmul_n(N),) * 2
    elif op == "layernorm":
        shape = layernorm_shape(N, params["hidden"])
    else:
        shape = (N,)
    t = {k: torch_bf16(a) for k, a in case.inputs.items()}
    y = torch_bf16(next(iter(case.outputs.values()))).reshape(-1)
    return t, y, shape
