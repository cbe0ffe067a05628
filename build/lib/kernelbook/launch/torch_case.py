"""A torch variant's view of a Case: torch tensors sharing the Case's device arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TorchCase:
    """What a torch variant's entry gets: torch tensors sharing memory with the Case's
    device arrays (bfloat16 data held as uint16 bits is viewed as torch.bfloat16)."""

    inputs: dict[str, Any]
    outputs: dict[str, Any]
    sizes: dict[str, int]
    params: dict[str, Any]
    dtype: str


def _tensor(torch, array, dtype: str):
    t = torch.as_tensor(array, device="cuda")
    if dtype == "bfloat16" and t.dtype == torch.uint16:
        t = t.view(torch.bfloat16)
    elif dtype == "float16" and t.dtype == torch.uint16:
        t = t.view(torch.float16)
    return t


def torch_case(case, params: dict[str, Any]) -> TorchCase:
    import torch

    return TorchCase(
        inputs={k: _tensor(torch, v, case.dtype) for k, v in case.inputs.items()},
        outputs={k: _tensor(torch, g.view, case.dtype) for k, g in case.outputs.items()},
        sizes=dict(case.sizes),
        params=dict(params),
        dtype=case.dtype,
    )
