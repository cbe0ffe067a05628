"""Variants that are not CUDA C: Triton kernels (compiled ahead of time to a cubin, launched
like a .cu kernel) and PyTorch programs (a callable over the problem's tensors).

kind: triton. ``entry`` is a ``@triton.jit`` function whose arguments are the problem's
kernel arguments (``Problem.kernel_arg_types``), then ``tl.constexpr`` meta-parameters taken
from the variant's defines by name; NUM_WARPS and NUM_STAGES are Triton's num_warps and
num_stages. It is compiled without a GPU for the config's arch; ptxas's report gives the
resources, cuobjdump the SASS, as for nvcc's cubins. Triton appends hidden pointer
parameters (global and profile scratch) to the kernel: the launch passes null for them.

kind: torch. ``entry(case, **defines)`` gets a :class:`TorchCase` and returns a
zero-argument callable that computes the outputs in place on the current stream.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kernelbook import problems
from kernelbook.build.nvcc import BuildResult, CompileError, parse_ptxas, sass_of
from kernelbook.config import TRITON_DEFAULTS, Variant, arch_number


def load_module(root: Path, variant: Variant) -> ModuleType:
    """Import a triton or torch variant's source file as a module of its own."""
    path = Path(root) / variant.source
    where = f"{variant.study}/{variant.id}"
    if not path.is_file():
        raise CompileError(f"{where}: source {variant.source} not found")
    name = f"kernelbook_variant_{variant.study}_{variant.id}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit reads the function's source through its module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise CompileError(f"{where}: importing {variant.source} failed: {e!r}") from None
    return module


def entry_function(root: Path, variant: Variant):
    module = load_module(root, variant)
    fn = getattr(module, variant.entry, None)
    if fn is None:
        raise CompileError(
            f"{variant.study}/{variant.id}: entry '{variant.entry}' is not in {variant.source}"
        )
    return fn


def triton_version() -> str:
    try:
        import triton
    except ImportError as e:
        raise CompileError(f"triton is not installed: {e}") from None
    return triton.__version__


def _ptx_params(ptx: str, entry: str) -> int:
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(([^)]*)\)", ptx)
    return len(re.findall(r"\.param\b", m.group(1))) if m else -1


@dataclass(frozen=True)
class TritonBuild(BuildResult):
    smem_dynamic: int = 0
    num_warps: int = 4
    params: int = 0  # the kernel's parameters, hidden ones included
    arch: str = ""  # the target Triton built the cubin for (sm_90a for capability 9.0)


def compile_triton(
    variant: Variant, arch: str, root: Path, dtype: str, problem: str, cubin: Path, timeout=600.0
) -> TritonBuild:
    """Compile ``entry`` ahead of time for ``arch`` (no GPU needed) and write its cubin."""
    where = f"{variant.study}/{variant.id}"
    version = triton_version()
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = entry_function(root, variant)
    if not hasattr(fn, "arg_names") or not hasattr(fn, "params"):
        raise CompileError(f"{where}: entry '{variant.entry}' is not a @triton.jit function")
    try:
        types = problems.get(problem).kernel_arg_types(dtype)
    except NotImplementedError as e:
        raise CompileError(f"{where}: {e}") from None
    names = list(fn.arg_names)
    runtime = [p.name for p in fn.params if not p.is_constexpr]
    meta = [p.name for p in fn.params if p.is_constexpr]
    if len(runtime) != len(types):
        raise CompileError(
            f"{where}: '{variant.entry}' takes {len(runtime)} runtime argument(s) "
            f"({', '.join(runtime)}), but problem '{problem}' passes {len(types)} "
            f"({', '.join(types)})"
        )
    if names[: len(runtime)] != runtime:
        raise CompileError(
            f"{where}: '{variant.entry}': its tl.constexpr parameters must come after the "
            f"problem's arguments ({', '.join(names)})"
        )
    missing = [m for m in meta if m not in variant.defines]
    if missing:
        raise CompileError(
            f"{where}: '{variant.entry}' has tl.constexpr parameter(s) {', '.join(missing)} that "
            f"neither defines nor tune give"
        )
    signature = dict(zip(runtime, types, strict=True))
    signature.update({m: "constexpr" for m in meta})
    constexprs = {m: variant.defines[m] for m in meta}
    capability = arch_number(arch)
    if not capability:
        raise CompileError(f"{where}: arch '{arch}' names no compute capability for Triton")
    target = GPUTarget("cuda", capability, 32)
    launch = {**TRITON_DEFAULTS, **variant.defines}
    options = {"num_warps": int(launch["NUM_WARPS"]), "num_stages": int(launch["NUM_STAGES"])}
    command = (
        f"triton {version}: triton.compile(ASTSource({variant.entry}, signature={signature}, "
        f"constexprs={constexprs}), target={target}, options={options})"
    )
    log = io.StringIO()
    saved = (knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile)
    knobs.nvidia.dump_ptxas_log = True  # ptxas -v's report, printed to stdout
    knobs.compilation.always_compile = True  # a cached kernel would run no ptxas
    try:
        with contextlib.redirect_stdout(log):
            kernel = triton.compile(
                ASTSource(fn, signature=signature, constexprs=constexprs),
                target=target,
                options=options,
            )
    except Exception as e:
        text = str(e).strip() or repr(e)
        # Triton's message ends with the cause, after the source excerpt ("at 2:11: ...");
        # the first line carries it, so that the run's closing summary shows it too
        cause = text.splitlines()[-1].strip()
        raise CompileError(
            f"{where}: triton failed on {variant.source} ({type(e).__name__}): {cause}\n"
            f"{text}\ncommand: {command}"
        ) from None
    finally:
        knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile = saved
    ptxas_log = log.getvalue()
    name = kernel.metadata.name
    resources = parse_ptxas(ptxas_log)
    if name not in resources:
        raise CompileError(f"{where}: no ptxas report for '{name}' in Triton's output")
    if kernel.metadata.global_scratch_size or kernel.metadata.profile_scratch_size:
        raise CompileError(
            f"{where}: the kernel needs Triton scratch memory (global "
            f"{kernel.metadata.global_scratch_size} B, profile "
            f"{kernel.metadata.profile_scratch_size} B), which this harness does not allocate"
        )
    cubin = Path(cubin)
    cubin.parent.mkdir(parents=True, exist_ok=True)
    tmp = cubin.with_name(cubin.name + ".tmp")
    tmp.write_bytes(kernel.asm["cubin"])
    sass = sass_of(tmp, timeout, where).get(name, Counter())
    tmp.replace(cubin)
    return TritonBuild(
        resources[name],
        sass,
        ptxas_log,
        [command],
        f"triton {version}",
        smem_dynamic=int(kernel.metadata.shared),
        num_warps=int(kernel.metadata.num_warps),
        params=_ptx_params(kernel.asm["ptx"], name),
        arch=_triton_arch(capability),
    )


def _triton_arch(capability: int) -> str:
    """The sm target Triton compiles a capability for (9.0 and later: the 'a' variant)."""
    try:
        from triton.backends.nvidia.compiler import sm_arch_from_capability

        return sm_arch_from_capability(capability)
    except ImportError:  # a Triton without it: its rule since 3.0
        return f"sm_{capability}" + ("a" if capability >= 90 else "")
