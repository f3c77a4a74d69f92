"""Kernel classes and process-group kinds, from names.

Compute classes (the twin's compute terms): GEMM, attention, MoE permute / grouped GEMM, optimizer,
norm/element-wise, other. A kernel's class is the first pattern that matches in :data:`COMPUTE_CLASSES`
(MoE before GEMM, so a grouped GEMM counts as MoE). On CPU-only traces the same patterns read ATen operator
names (``aten::addmm`` is a GEMM, ``aten::layer_norm`` a norm).

Process-group kind (TP, CP, DP, PP, EP) comes first from the trace's own description of the group
(``distributedInfo.pg_config[].pg_desc``, the ``Process Group Description`` of ``record_param_comms``):
Megatron's ``TENSOR_MODEL_PARALLEL_GROUP``, torchtitan's ``mesh_tp``, a ``new_group(group_desc="tp0")``;
then from the NCCL kernel name (send/recv is pipeline traffic, all-to-all is expert dispatch). The
HTA-compatible kernel types (communication / memory / computation) are HTA's own patterns
(HolisticTraceAnalysis ``hta/common/types.py``, MIT licence), so the reference comparison uses one rule.
Kernel names repeat by the thousand in a trace, so every classifier is memoised by name.
"""

from __future__ import annotations

import re
from functools import lru_cache

COMPUTE_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("moe", re.compile(r"moe|permute|grouped_?gemm|groupgemm|topk|token_dispatch|router|expert", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa|scaled_dot_product|softmax|rope|rotary", re.I)),
    ("optimizer", re.compile(r"adam|sgd|optimizer|multi_tensor|foreach|lamb", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|cublas|matmul|wgmma|xmma|nvjet|sm\d\d_xmma|addmm|\bmm\b|::mm\b|bmm|"
                        r"linear|Kernel2|mm_backward|MmBackward|AddmmBackward|BmmBackward|hipblaslt|Cijk_", re.I)),
    ("norm_elementwise", re.compile(r"norm|elementwise|vectorized|reduce|gelu|silu|relu|add|mul|div|copy|"
                                    r"dropout|cat|fill|embedding|index|softplus|sigmoid|tanh|exp|where", re.I)),
)
COMPUTE_KEYS: tuple[str, ...] = (*(c for c, _ in COMPUTE_CLASSES), "other")
"""Compute classes in priority order (an instant covered by two classes counts once, in the first)."""

COMM_KINDS: tuple[str, ...] = ("tp", "cp", "ep", "pp", "dp", "world", "unknown")
"""Group kinds in priority order; ``world`` is the default group, ``unknown`` a group the trace does not name."""

_DESC_KIND = (
    ("ep", re.compile(r"(^|[^a-z])(e?ep|expert|moe)([^a-z]|$)|expert", re.I)),
    ("cp", re.compile(r"(^|[^a-z])cp([^a-z]|$)|context", re.I)),
    ("pp", re.compile(r"(^|[^a-z])pp([^a-z]|$)|pipe", re.I)),
    ("tp", re.compile(r"(^|[^a-z])tp([^a-z]|$)|tensor", re.I)),
    ("dp", re.compile(r"(^|[^a-z])(dp|fsdp|ddp|hsdp)(_shard|_replicate)?([^a-z]|$)|data_parallel|data", re.I)),
    ("world", re.compile(r"default_pg|^world$|^global", re.I)),
)

_COMM_NAME = re.compile(r"nccl|rccl|gloo:|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|"
                        r"all_?to_?all|broadcast|sendrecv|send_recv|^send$|^recv$|barrier", re.I)
_DEVICE_COMM = re.compile(r"^nccl|^rccl|ncclKernel|ncclDevKernel|^hccl|^gloo:", re.I)
_MEMCPY = re.compile(r"^(hip)?Memcpy|^(hip)?Memset|^dma|^cudaMemcpy", re.I)

# HTA's patterns, verbatim (hta/common/types.py): comm first, then memory, then compute (inverse match)
HTA_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
HTA_MEMORY = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
HTA_NON_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)|(^runFunction)|"
    r"(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)")


@lru_cache(maxsize=1 << 16)
def compute_class(name: str) -> str:
    """The compute class of a kernel or operator name (``other`` when no pattern matches)."""
    for cls, pat in COMPUTE_CLASSES:
        if pat.search(name):
            return cls
    return "other"


@lru_cache(maxsize=1 << 16)
def is_comm_name(name: str) -> bool:
    """A host-side collective operator or a communication kernel."""
    return bool(_COMM_NAME.search(name))


@lru_cache(maxsize=1 << 16)
def is_device_comm(name: str) -> bool:
    """A communication kernel (NCCL/RCCL/HCCL) or a gloo worker's collective."""
    return bool(_DEVICE_COMM.search(name))


@lru_cache(maxsize=1 << 16)
def is_memcpy(name: str) -> bool:
    return bool(_MEMCPY.search(name))


@lru_cache(maxsize=1 << 16)
def kind_from_desc(desc: str) -> str | None:
    """Group kind named by a process-group description, or None."""
    for kind, pat in _DESC_KIND:
        if pat.search(desc):
            return kind
    return None


@lru_cache(maxsize=1 << 16)
def kind_from_kernel(name: str) -> str:
    """Group kind guessed from a communication kernel name alone: send/recv -> pp, all-to-all -> ep."""
    low = name.lower()
    if "sendrecv" in low or "send" in low or "recv" in low:
        return "pp"
    if "alltoall" in low or "all_to_all" in low:
        return "ep"
    return "unknown"


@lru_cache(maxsize=1 << 16)
def collective_of(name: str) -> str:
    """``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``broadcast``, ``send``, ``recv``,
    ``barrier`` or ``other`` from an operator or kernel name."""
    low = name.lower().replace("_", "")
    for key, out in (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                     ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"),
                     ("send", "send"), ("recv", "recv"), ("barrier", "barrier"), ("reduce", "reduce")):
        if key in low:
            return out
    return "other"


@lru_cache(maxsize=1 << 16)
def hta_kernel_type(name: str) -> str:
    """HTA's kernel type: ``COMMUNICATION``, ``MEMORY``, ``COMPUTATION`` or ``OTHER``."""
    if HTA_COMM.match(name):
        return "COMMUNICATION"
    if HTA_MEMORY.match(name):
        return "MEMORY"
    if not HTA_NON_COMPUTE.match(name):
        return "COMPUTATION"
    return "OTHER"
