"""Problems: what a kernel computes, how to check it, and what it costs.

A problem module defines one :class:`~kernelbook.problems.base.Problem` subclass and
registers it here. Problems are importable without a GPU; they import CuPy and PyTorch
only inside the methods that run on the device.
"""

from __future__ import annotations

from kernelbook.problems.attention import Attention
from kernelbook.problems.base import Problem
from kernelbook.problems.gemm import Gemm
from kernelbook.problems.hgemm import Hgemm
from kernelbook.problems.paged_decode import PagedDecode
from kernelbook.problems.regimes import Regimes
from kernelbook.problems.softmax import Softmax
from kernelbook.problems.transpose import Transpose
from kernelbook.problems.w4a16 import W4A16
from kernelbook.problems.w8a8 import W8A8

_PROBLEMS = (
    *(Gemm(), Hgemm(), Transpose(), Softmax(), Regimes(), Attention()),
    *(W4A16(), W8A8(), PagedDecode()),
)
_REGISTRY: dict[str, Problem] = {p.name: p for p in _PROBLEMS}


def get(name: str) -> Problem:
    if name not in _REGISTRY:
        raise KeyError(f"unknown problem '{name}' (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name]


def names() -> list[str]:
    return sorted(_REGISTRY)
