"""bfloat16 without a bfloat16 array type.

CuPy has no bfloat16, so every bf16 buffer of a problem is a uint16 array holding the bits.
Inputs are float32 draws rounded to bf16 (round to nearest even, on the device), so the
float64 reference is the exact function of what the kernel reads. An output declared
``GuardedArray(xp, n, "bfloat16")`` is poisoned with bf16 NaN before every launch (an
unwritten element fails as NaN) and decoded to float32 values by the check. A baseline sees
the same bytes through a zero-copy int16 -> bfloat16 torch view (``torch_bf16``), and its
own output is held against the reference by ``base.rel_err``.

Every function takes the array module ``xp`` (CuPy on the device, NumPy where the CPU tests
run it); the torch ones take torch tensors on either.
"""

from __future__ import annotations

BF16_NAN = 0x7FC0


def bf16_bits(xp, values):
    """float32 array -> uint16 bf16 bits, rounded to nearest even (finite inputs)."""
    b = xp.ascontiguousarray(values, dtype=xp.float32).view(xp.uint32)
    b = (b + (((b >> 16) & 1) + 0x7FFF)) >> 16
    return b.astype(xp.uint16)


def bf16_values(xp, bits):
    """uint16 bf16 bits -> float32 values (exact)."""
    return (xp.ascontiguousarray(bits).astype(xp.uint32) << 16).view(xp.float32)


def torch_bf16(array, *shape):
    """A uint16 array of bf16 bits (CuPy, or NumPy on the CPU) or a torch tensor (uint16,
    int16 or bfloat16) as a bfloat16 torch tensor sharing its memory, viewed as ``shape``
    when one is given."""
    import torch

    if not isinstance(array, torch.Tensor):
        # through int16: torch reads a uint16 __cuda_array_interface__ only in newer versions
        on_host = type(array).__module__ == "numpy"
        array = torch.as_tensor(array.view("int16"), device=None if on_host else "cuda")
    t = array
    if t.dtype == torch.uint16:
        t = t.view(torch.int16)
    if t.dtype != torch.bfloat16:
        t = t.view(torch.bfloat16)
    return t.view(shape) if shape else t


class Decoded:
    """A bf16 output (a GuardedArray of uint16 bits) seen as float32 values, with the
    array's own guard bands: what the generic check reads."""

    def __init__(self, xp, g):
        self._g = g
        self.guard = g.guard
        self.view = bf16_values(xp, g.view)

    def violations(self) -> tuple[int, int]:
        return self._g.violations()
