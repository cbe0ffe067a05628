"""YAML in, a validated and resolved study model out (expressions, CUDA limits, problems)."""

from kernelbook.config.limits import (  # noqa: F401
    MAX_BLOCK,
    MAX_CLUSTER_BLOCKS,
    MAX_GRID,
    MAX_THREADS_PER_BLOCK,
    MAX_TMA_BOX,
    NOMINAL_SM_COUNT,
    SM_COUNT,
    SMEM_OPTIN_BYTES,
    arch_number,
    cluster_problems,
    launch_problems,
    smem_optin_limit,
    tma_problems,
)
from kernelbook.config.load import (  # noqa: F401
    KINDS,
    SOURCE_SUFFIX,
    TRITON_DEFAULTS,
    load_project,
    load_project_file,
    load_settings,
    load_study,
)
from kernelbook.config.model import Launch, Project, Study, Variant  # noqa: F401
from kernelbook.config.schema import (  # noqa: F401
    CANDIDATE_SEP,
    SCHEMA_DIR,
    ConfigError,
    read_yaml,
    schema,
    tool_limit,
    validate,
)
from kernelbook.config.sizes import expand_sizes  # noqa: F401
