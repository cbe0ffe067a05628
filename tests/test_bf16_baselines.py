"""The bf16 convention the BF16 problems share (kernelbook.problems.bf16: a "bfloat16"
GuardedArray, Case.ready, the check's decoding) and every problem's baseline code on
PyTorch's CPU kernels: the same tensors, views, shapes and error measure as on the GPU, with
device='cuda' dropped (the cpu_torch fixture). What only a GPU has (cuDNN's attention,
tinygemm's int4 packing) is left to the GPU tests."""

from __future__ import annotations

import numpy as np
import pytest

from kernelbook import problems
from kernelbook.problems.base import (
    Case,
    GuardedArray,
    InputModified,
    NonFinite,
    OutOfBounds,
    WrongResult,
    rel_err,
)
from kernelbook.problems.bf16 import BF16_NAN, bf16_bits, bf16_values, torch_bf16

torch = pytest.importorskip("torch")


# ------------------------------------------------------------------------------------------
# kernelbook.problems.bf16


def test_torch_bf16_is_a_view_of_the_bits_not_a_copy():
    values = np.array([1.0, -2.5, 3.0e-3, 65504.0, -0.0, 1e-30], dtype=np.float32)
    bits = bf16_bits(np, values)
    t = torch_bf16(bits, 2, 3)
    assert t.dtype == torch.bfloat16 and tuple(t.shape) == (2, 3)
    assert np.array_equal(t.float().numpy().ravel(), bf16_values(np, bits))
    t[0, 0] = 7.0  # written through the view: the array's bits change
    assert bits[0] == 0x40E0
    # a torch tensor of the bits, as uint16 or int16, or already bfloat16: the same values
    for held in (torch.from_numpy(bits.view(np.int16)), torch.from_numpy(bits).view(torch.uint16)):
        assert torch.equal(torch_bf16(held), torch_bf16(bits))
    assert torch_bf16(t) is t


def test_rel_err_decodes_bf16_and_refuses_what_is_not_finite():
    ref = np.linspace(-3, 3, 64)
    exact = torch.from_numpy(ref.astype(np.float32)).to(torch.bfloat16)
    rounded = bf16_values(np, bf16_bits(np, ref.astype(np.float32))).astype(np.float64)
    assert rel_err(np, exact, rounded) == 0.0
    got = rel_err(np, exact, ref)  # bf16's rounding of ref, about 2^-9 relative
    assert 1e-4 < got < 4e-3
    assert rel_err(np, torch.from_numpy(ref.astype(np.float32)), ref) < 1e-7  # float32 as is
    nan = exact.clone()
    nan[5] = float("nan")
    assert rel_err(np, nan, ref) == float("inf")
    assert rel_err(np, exact, np.zeros_like(ref)) == float("inf")
    strided = exact.view(8, 8).t()  # not contiguous: read in its own order
    assert rel_err(np, strided, ref.reshape(8, 8).T.ravel()) == got


# ------------------------------------------------------------------------------------------
# A bf16 output: poisoned before a launch, decoded by the check


def _bf16_case(n=40, guard=8):
    x = bf16_bits(np, np.random.default_rng(1).standard_normal(n).astype(np.float32))
    y = GuardedArray(np, n, "bfloat16", guard)
    side = GuardedArray(np, 3, np.float32, guard)  # a float32 output beside it, as attention's L
    ref = {"y": 2.0 * bf16_values(np, x).astype(np.float64), "L": np.arange(3.0)}
    case = Case(
        sizes={"N": n},
        dtype="bfloat16",
        seed=0,
        inputs={"x": x},
        outputs={"y": y, "L": side},
        reference=ref,
        args=(),
    )
    return case.ready(), x


def test_a_bfloat16_output_is_uint16_bits_poisoned_with_bf16_nan(numpy_as_cupy):
    case, x = _bf16_case()
    y, side = case.outputs["y"], case.outputs["L"]
    assert y.bf16 and y.view.dtype == np.uint16 and not side.bf16
    assert (y.view == BF16_NAN).all() and np.isnan(side.view).all()
    assert case.input_copies["x"] is not x and np.array_equal(case.input_copies["x"], x)
    y.view[:] = 0
    case.reset()
    assert (y.view == BF16_NAN).all()
    assert (y.full[: y.guard].view(np.uint8) == 0xA5).all()  # the guard bands are left alone


def test_the_check_reads_a_bf16_output_as_values(numpy_as_cupy):
    p = problems.get("hgemm")  # any problem: the check is the base class's
    case, x = _bf16_case()
    y, side = case.outputs["y"], case.outputs["L"]
    side.view[:] = np.arange(3.0)
    with pytest.raises(NonFinite, match="40 of 40 element.* of y"):  # never written
        p.check(case, 1e-2, "w")
    y.view[:] = bf16_bits(np, case.reference["y"].astype(np.float32))
    assert p.check(case, 1e-2, "w").rel_err == 0.0
    y.view[7] = bf16_bits(np, np.float32([50.0]))[0]
    with pytest.raises(WrongResult, match="w: relative error"):
        p.check(case, 1e-2, "w")
    y.view[:] = bf16_bits(np, case.reference["y"].astype(np.float32))
    y.full[-1] = 0  # the last element of the guard band after y
    with pytest.raises(OutOfBounds, match="0 element.* before it and 1 after it"):
        p.check(case, 1e-2, "w")
    case, x = _bf16_case()
    x[3] ^= 1
    with pytest.raises(InputModified, match="1 element.* of input x"):
        p.check(case, 1e-2, "w")


def test_an_unknown_baseline_names_the_problem_and_its_baselines():
    with pytest.raises(
        KeyError, match=r"w4a16 has no baseline 'cublas' \(baselines: .*cublas_bf16"
    ):
        problems.get("w4a16").known_baseline("cublas")
    problems.get("w4a16").known_baseline("cublas_bf16")


# ------------------------------------------------------------------------------------------
# Each problem's baseline, on the CPU


def _normal(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


class _Draws:  # the CuPy Generator's call, on NumPy
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def standard_normal(self, shape, dtype):
        return self.rng.standard_normal(shape).astype(dtype)


def _gemm_shaped(name, M, N, K, dtype="bfloat16"):
    sizes = {"M": M, "N": N, "K": K}
    return problems.get(name).build_case(np, sizes, dtype, 0, _normal(1, M, K), _normal(2, N, K))


GEMM_PARAMS = {"alpha": 1.5, "beta": -0.5}
CASES = {
    "gemm": lambda: problems.get("gemm").build_case(
        np,
        {"M": 9, "N": 20, "K": 33},
        "float32",
        GEMM_PARAMS,
        0,
        *(_normal(i, *shape) for i, shape in enumerate([(9, 33), (33, 20), (9, 20)])),
    ),
    "transpose": lambda: problems.get("transpose").build_case(
        np, {"M": 37, "N": 45}, "float32", 0, _normal(4, 37, 45)
    ),
    "softmax": lambda: problems.get("softmax").build_case(
        np, {"R": 7, "N": 300}, "bfloat16", 0, _normal(5, 7, 300)
    ),
    "hgemm": lambda: _gemm_shaped("hgemm", 5, 24, 64),
    "w4a16": lambda: _gemm_shaped("w4a16", 3, 40, 256),
    "w8a8": lambda: _gemm_shaped("w8a8", 16, 32, 64, "float8_e4m3"),
    "paged_decode": lambda: problems.get("paged_decode").build_case(
        np, {"B": 3, "L": 100}, "bfloat16", 0, _Draws(3), guard=64
    ),
    "attention": lambda: problems.get("attention").build_case(
        np,
        {"B": 1, "H": 2, "S": 48, "D": 32, "causal": 1},
        "bfloat16",
        0,
        [_normal(i, 1 * 2 * 48 * 32) for i in range(3)],
    ),
}
# what the CPU runs of each problem's baselines (cuDNN's attention and tinygemm's packing
# exist on the GPU only)
ON_CPU = [
    ("gemm", "cublas"),
    ("transpose", "torch"),
    ("softmax", "torch"),
    ("hgemm", "cublas"),
    ("w4a16", "dequant_matmul"),
    ("w4a16", "cublas_bf16"),
    ("w8a8", "scaled_mm"),
    ("w8a8", "cublas_bf16"),
    ("paged_decode", "sdpa_padded"),
    ("attention", "sdpa_flash"),
]


def test_every_baseline_is_run_on_the_cpu_or_said_to_need_a_gpu():
    gpu_only = {("attention", "sdpa_cudnn"), ("w4a16", "tinygemm_int4")}
    regimes = {("regimes", "eager")}  # an op a case: test_the_eager_baseline_of_each_regime_op
    named = {(p, b) for p in problems.names() for b in problems.get(p).baselines}
    assert named == set(ON_CPU) | gpu_only | regimes


@pytest.mark.parametrize("problem,name", ON_CPU, ids=lambda x: str(x))
def test_a_baseline_computes_the_problem_within_its_tolerance(cpu_torch, problem, name):
    """The baseline's own call at a small size: its error against the float64 reference
    within the problem's tolerance (and above 0 where its output is rounded: it was read),
    its mode naming torch's version, and its call (what is timed) runs again."""
    p = problems.get(problem)
    case = CASES[problem]()
    params = GEMM_PARAMS if problem == "gemm" else {}
    base = p.baseline(case, name, params)
    assert base.name == name and f"torch {torch.__version__}" in base.mode
    assert base.rel_err <= p.tolerance(case.sizes, case.dtype), base.rel_err
    # read from the output: a bf16 one is rounded, a float32 GEMM's sums are reordered; a
    # transpose moves values, exactly
    assert (base.rel_err == 0) == (problem == "transpose"), base.rel_err
    base.run()
    base.run()


@pytest.mark.parametrize("op", ["scale", "chain", "sum", "matmul", "layernorm"])
def test_the_eager_baseline_of_each_regime_op(cpu_torch, op):
    p = problems.get("regimes")
    rng = np.random.default_rng(5)
    case = p.build_case(np, {"N": 4099}, "bfloat16", {}, 1, rng, op, 16, True)
    base = p.baseline(case, "eager", p.default_params)
    assert base.rel_err < p.tolerance(case.sizes, "bfloat16"), (op, base.rel_err)
    assert f"eager {op}" in base.mode
    base.run()
