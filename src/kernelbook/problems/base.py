"""What every problem shares: guarded outputs, the correctness check, the interface."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelbook.problems.bf16 import BF16_NAN, Decoded, bf16_values

GUARD_ELEMENTS = 64 * 1024
GUARD_BYTE = 0xA5  # every byte of a guard band; a kernel is vanishingly unlikely to write it


class CheckError(RuntimeError):
    """A kernel computed something wrong; ``kind`` says how (for tests and tables)."""

    kind = "wrong"


class WrongResult(CheckError):
    kind = "wrong"


class NonFinite(CheckError):
    kind = "nonfinite"


class OutOfBounds(CheckError):
    kind = "out_of_bounds"


class InputModified(CheckError):
    kind = "input_modified"


class GuardedArray:
    """A device array with guard bands before and after, to catch out-of-bounds writes.
    ``dtype`` "bfloat16" makes a uint16 array of bf16 bits (``bf16``): the check decodes it
    and a reset poisons it with bf16 NaN (kernelbook.problems.bf16)."""

    def __init__(self, xp, n: int, dtype, guard: int = GUARD_ELEMENTS):
        self.bf16 = isinstance(dtype, str) and dtype == "bfloat16"
        if self.bf16:
            dtype = xp.uint16
        self.guard = guard
        self.full = xp.empty(n + 2 * guard, dtype=dtype)
        self.view = self.full[guard : guard + n]
        self._itemsize = itemsize = self.full.dtype.itemsize
        raw = self.full.view(xp.uint8)
        self._before = raw[: guard * itemsize]
        self._after = raw[(guard + n) * itemsize :]
        if guard:
            self._before.fill(GUARD_BYTE)
            self._after.fill(GUARD_BYTE)

    def violations(self) -> tuple[int, int]:
        """Elements written in the guard bands (before, after)."""
        if not self.guard:
            return 0, 0
        out = []
        for band in (self._before, self._after):
            changed = (band != GUARD_BYTE).reshape(-1, self._itemsize).any(axis=1)
            out.append(int(changed.sum()))
        return out[0], out[1]


@dataclass
class Case:
    """One problem instance on the device: inputs, outputs, reference, kernel arguments."""

    sizes: dict[str, int]
    dtype: str
    seed: int
    inputs: dict[str, Any]
    outputs: dict[str, GuardedArray]
    reference: dict[str, Any]  # float64
    args: tuple
    # values the outputs hold before a launch (gemm reads C); the others are poisoned: NaN
    initial: dict[str, Any] = field(default_factory=dict)
    input_copies: dict[str, Any] = field(default_factory=dict)

    def reset(self) -> None:
        """Every output back to its initial value, or to NaN (bf16 NaN for bf16 bits)."""
        for name, g in self.outputs.items():
            if name in self.initial:
                g.view[...] = self.initial[name]
            elif getattr(g, "bf16", False):
                g.view.fill(BF16_NAN)
            else:
                g.view.fill(float("nan"))

    def ready(self) -> Case:
        """The case as a launch finds it: a copy of every input (the check holds each input
        against its copy) and the outputs reset. A problem's setup ends with it."""
        self.input_copies = {name: a.copy() for name, a in self.inputs.items()}
        self.reset()
        return self


@dataclass(frozen=True)
class CheckResult:
    rel_err: float
    max_err: float  # max |out - ref| / rms(ref)


@dataclass(frozen=True)
class Baseline:
    name: str
    mode: str  # what library and math mode: recorded on every row
    run: Callable[[], None]
    rel_err: float


def size_seed(seed: int, sizes: dict[str, int]) -> int:
    """A seed per (run seed, size), so every size gets its own reproducible inputs."""
    text = f"{seed}:" + ",".join(f"{k}={v}" for k, v in sizes.items())
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def rel_err(xp, out, ref) -> float:
    """Norm-wise relative error of a baseline's output ``out`` (a torch tensor: bfloat16, or
    any type NumPy reads) against the flat float64 reference ``ref``; inf where any element
    is not finite or the reference is all zeros."""
    import torch

    out = out.contiguous()
    if out.dtype == torch.bfloat16:
        got = bf16_values(xp, xp.asarray(out.view(torch.int16)).view(xp.uint16))
    else:
        got = xp.asarray(out)
    got = got.ravel().astype(xp.float64)
    norm = float(xp.linalg.norm(ref))
    if not bool(xp.isfinite(got).all()) or not norm:
        return float("inf")
    return float(xp.linalg.norm(got - ref)) / norm


class Problem:
    name: str = ""
    size_names: tuple[str, ...] = ()
    zero_sizes: tuple[str, ...] = ()  # size names that may be 0 (flags, e.g. causal)
    # (x, (by, ...)): the worklog adds a figure of throughput against size x, a panel per by
    sweep_facets: tuple[str, tuple[str, ...]] | None = None
    dtypes: tuple[str, ...] = ()
    baselines: dict[str, str] = {}
    default_params: dict[str, Any] = {}
    # other functions a reference kernel may compute instead (variant key `computes`);
    # setup(..., computes=name) then builds that function's reference
    alternatives: dict[str, str] = {}
    # those alternatives that compute the problem's own outputs and more (attention's O with
    # its logsumexp): their variants are ladder steps, not reference kernels, and compete
    # for the headline
    supersets: frozenset[str] = frozenset()
    figure_of_merit = "tflops"  # or "gbps"
    # the compute roof of the roofline: "fp32" (the FP32 peak, cuBLAS FP32) or "bf16_tensor"
    # (the dense BF16 tensor peak, cuBLAS BF16). With "bf16_tensor", the FLOPs of a profile
    # are the larger of the model's (flops()) and what ncu counts in FP instructions: ncu's
    # per-instruction FLOP counters do not see tensor-core (HMMA/HGMMA) work.
    peak = "fp32"
    elem_factor = 50.0  # max element error may be this many times the tolerance

    # ---- cost model (no GPU) ------------------------------------------------------
    def flops(self, sizes: dict[str, int]) -> float:
        raise NotImplementedError

    def min_bytes(self, sizes: dict[str, int], dtype: str) -> float:
        raise NotImplementedError

    def tolerance(self, sizes: dict[str, int], dtype: str) -> float:
        raise NotImplementedError

    def cost(
        self, sizes: dict[str, int], dtype: str, computes: str | None = None, params=None
    ) -> tuple[float, float]:
        """(FLOP, minimal bytes) of one launch of the function ``computes`` names (None: the
        problem's own); a problem whose alternatives cost differently overrides this."""
        return self.flops(sizes), self.min_bytes(sizes, dtype)

    def label(self, sizes: dict[str, int]) -> str:
        return "x".join(str(sizes[n]) for n in self.size_names)

    def parse_size(self, text: str) -> dict[str, int]:
        """'4096' (all names), '4096x4096x1000' (in order) or 'M=4096,N=4096,K=1000'."""
        text = text.strip()
        try:
            if "=" in text:
                pairs = dict(p.split("=", 1) for p in text.split(","))
                sizes = {k.strip(): int(v) for k, v in pairs.items()}
            elif "x" in text:
                parts = [int(p) for p in text.split("x")]
                if len(parts) != len(self.size_names):
                    raise ValueError
                sizes = dict(zip(self.size_names, parts, strict=True))
            else:
                sizes = dict.fromkeys(self.size_names, int(text))
        except ValueError:
            raise ValueError(
                f"size '{text}' is not N, {'x'.join(self.size_names)} or "
                f"{','.join(n + '=..' for n in self.size_names)}"
            ) from None
        if set(sizes) != set(self.size_names) or any(
            v < (0 if k in self.zero_sizes else 1) for k, v in sizes.items()
        ):
            raise ValueError(f"size '{text}' must give positive {', '.join(self.size_names)}")
        sizes = {n: sizes[n] for n in self.size_names}
        why = self.size_error(sizes)
        if why:
            raise ValueError(f"size '{text}': {why}")
        return sizes

    def size_error(self, sizes: dict[str, int]) -> str | None:
        """Why the problem cannot be posed at ``sizes`` (a format's K must hold whole
        quantization groups), or None. The config check and ``--size`` ask it."""
        return None

    # ---- device side ---------------------------------------------------------------
    def kernel_arg_types(self, dtype: str) -> tuple[str, ...]:
        """The kernel argument list (``Case.args``) as Triton types (``i32``, ``fp32``,
        ``*fp32``, ``*bf16``...), for compiling a Triton variant ahead of time."""
        raise NotImplementedError(
            f"problem '{self.name}' does not describe its kernel arguments for Triton "
            "(Problem.kernel_arg_types)"
        )

    def setup(
        self,
        sizes,
        dtype,
        params,
        seed,
        guard: int = GUARD_ELEMENTS,
        reference=True,
        computes: str | None = None,
    ) -> Case:
        """Inputs, outputs (``guard`` elements of guard band each side), float64 reference
        of the problem's function, or of the alternative ``computes`` names."""
        raise NotImplementedError

    def baseline(self, case: Case, name: str, params) -> Baseline:
        raise NotImplementedError

    def known_baseline(self, name: str) -> None:
        """A KeyError naming the problem unless ``name`` is one of its baselines."""
        if name not in self.baselines:
            raise KeyError(
                f"{self.name} has no baseline '{name}' (baselines: {', '.join(self.baselines)})"
            )

    def check(self, case: Case, tol: float, where: str) -> CheckResult:
        """Check a case's outputs after one launch (bf16 outputs decoded to their values);
        raise a CheckError naming ``where``."""
        import cupy as cp

        outputs = {
            n: Decoded(cp, g) if getattr(g, "bf16", False) else g for n, g in case.outputs.items()
        }
        for name, data in case.inputs.items():
            if not bool(cp.array_equal(data, case.input_copies[name])):
                changed = int((data != case.input_copies[name]).sum())
                raise InputModified(
                    f"{where}: the kernel wrote {changed} element(s) of input {name}"
                )
        result = None
        for name, g in outputs.items():
            before, after = g.violations()
            if before or after:
                raise OutOfBounds(
                    f"{where}: the kernel wrote outside {name}: {before} element(s) in the "
                    f"{g.guard}-element guard band before it and {after} after it"
                )
            out = g.view.astype(cp.float64)
            ref = case.reference[name]
            finite = cp.isfinite(out)
            if not bool(finite.all()):
                bad = int((~finite).sum())
                first = int(cp.argmin(finite))
                raise NonFinite(
                    f"{where}: {bad} of {out.size} element(s) of {name} are NaN or Inf "
                    f"(first at flat index {first}: {float(out[first])})"
                )
            diff = out - ref
            ref_norm = float(cp.linalg.norm(ref))
            rel = float(cp.linalg.norm(diff)) / ref_norm if ref_norm else float(cp.abs(diff).max())
            rms = ref_norm / (ref.size**0.5) if ref_norm else 1.0
            max_err = float(cp.abs(diff).max()) / rms
            if rel > tol:
                raise WrongResult(
                    f"{where}: relative error ||{name}-ref||/||ref|| = {rel:.3e} exceeds the "
                    f"tolerance {tol:.1e} (float64 reference)"
                )
            if max_err > self.elem_factor * tol:
                worst = int(cp.argmax(cp.abs(diff)))
                raise WrongResult(
                    f"{where}: element {worst} of {name} is off by {max_err:.3e} x rms(ref), over "
                    f"the bound {self.elem_factor * tol:.1e} (unwritten or wrong element; "
                    f"norm-wise relative error {rel:.2e})"
                )
            result = (
                CheckResult(rel, max_err)
                if result is None
                else CheckResult(max(rel, result.rel_err), max(max_err, result.max_err))
            )
        return result


class XWProblem(Problem):
    """A problem of x (M x K) against a weight matrix W (N x K) held row-major: a GEMM with
    B given transposed, a decode GEMV, a quantized one. Its setup draws x then W as float32
    standard normals from the size's own seed and hands them to ``build_case``, which makes
    the case in array module ``xp`` (CuPy on the device, NumPy in the CPU tests)."""

    size_names = ("M", "N", "K")

    def setup(
        self, sizes, dtype, params, seed, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        import cupy as cp

        why = self.size_error(sizes)
        if why:
            raise ValueError(f"{self.name} at {self.label(sizes)}: {why}")
        M, N, K = sizes["M"], sizes["N"], sizes["K"]
        rng = cp.random.Generator(cp.random.XORWOW(size_seed(seed, sizes)))
        xf = rng.standard_normal((M, K), dtype=cp.float32)
        wf = rng.standard_normal((N, K), dtype=cp.float32)
        return self.build_case(cp, sizes, dtype, seed, xf, wf, guard, reference, computes)

    def build_case(
        self, xp, sizes, dtype, seed, xf, wf, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        raise NotImplementedError
