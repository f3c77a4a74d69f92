"""Layout flags for the training script: the ParallelismSpec and model shape as Megatron-LM or torchtitan
command-line arguments. Each function returns ``(args, env)``: an argument list (unquoted; the renderers
quote it for their target) and ``(name, value, why)`` environment variables the framework needs.

Flag names: Megatron-LM ``megatron/training/arguments.py`` (core 0.9+); torchtitan's ``JobConfig`` sections
(``--parallelism.*``, ``--training.*``, ``--activation_checkpoint.*``, ``--checkpoint.*``), 2025 layout.
"""

from __future__ import annotations

from clustertwin.errors import SpecError
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec

EnvTriple = tuple[str, str, str]

_TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16", "fp32": "float32", "tf32": "float32"}


def megatron_args(model: ModelSpec, p: ParallelismSpec, checkpoint_dir: str) -> tuple[list[str], list[EnvTriple]]:
    """Megatron-LM ``pretrain_gpt.py`` arguments for the layout and model shape."""
    args = [
        "--tensor-model-parallel-size", str(p.tp),
        "--pipeline-model-parallel-size", str(p.pp),
        "--context-parallel-size", str(p.cp),
    ]
    if p.vpp > 1:
        if model.layers % (p.pp * p.vpp):
            raise SpecError(f"layers={model.layers} is not divisible by pp x vpp = {p.pp} x {p.vpp}",
                            path=("parallelism", "vpp"))
        args += ["--num-layers-per-virtual-pipeline-stage", str(model.layers // (p.pp * p.vpp))]
    if p.sequence_parallel:
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(p.micro_batch), "--global-batch-size", str(p.global_batch)]
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if p.zero == 3:
        args.append("--use-torch-fsdp2")
    elif p.zero >= 1:
        args.append("--use-distributed-optimizer")
    if p.precision in ("bf16", "fp8"):
        args.append("--bf16")
    elif p.precision == "fp16":
        args.append("--fp16")
    if p.precision == "fp8":
        args += ["--fp8-format", "hybrid"]
    args += [
        "--num-layers", str(model.layers),
        "--hidden-size", str(model.hidden),
        "--ffn-hidden-size", str(model.d_ffn),
        "--num-attention-heads", str(model.heads),
        "--seq-length", str(model.seq_len),
        "--max-position-embeddings", str(model.seq_len),
    ]
    if model.n_kv_heads != model.heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.n_kv_heads)]
    if model.ffn == "swiglu":
        args.append("--swiglu")
    if model.moe is not None:
        args += ["--num-experts", str(model.moe.experts), "--moe-router-topk", str(model.moe.top_k),
                 "--moe-ffn-hidden-size", str(model.moe.expert_ffn_hidden),
                 "--expert-model-parallel-size", str(p.ep)]
    args += ["--save", checkpoint_dir, "--load", checkpoint_dir, "--exit-signal-handler"]
    env = [("CUDA_DEVICE_MAX_CONNECTIONS", "1",
            "Megatron: one hardware queue keeps TP communication ordered ahead of compute (overlap)")]
    return args, env


def torchtitan_args(model: ModelSpec, p: ParallelismSpec, checkpoint_dir: str) -> tuple[list[str], list[EnvTriple]]:
    """torchtitan ``train.py`` overrides (``--section.key value``) for the layout."""
    shard, replicate = (p.dp, 1) if p.zero >= 1 else (1, p.dp)
    args = [
        "--parallelism.tensor_parallel_degree", str(p.tp),
        "--parallelism.pipeline_parallel_degree", str(p.pp),
        "--parallelism.context_parallel_degree", str(p.cp),
        "--parallelism.data_parallel_shard_degree", str(shard),
        "--parallelism.data_parallel_replicate_degree", str(replicate),
    ]
    if p.ep > 1:
        args += ["--parallelism.expert_parallel_degree", str(p.ep)]
    if p.pp > 1:
        schedule = "Interleaved1F1B" if p.vpp > 1 else "1F1B"
        args += ["--parallelism.pipeline_parallel_schedule", schedule,
                 "--parallelism.pipeline_parallel_microbatch_size", str(p.micro_batch)]
    local_batch = p.global_batch // p.dp
    args += [
        "--training.local_batch_size", str(local_batch),
        "--training.global_batch_size", str(p.global_batch),
        "--training.seq_len", str(model.seq_len),
        "--training.mixed_precision_param", _TORCH_DTYPE[p.precision],
        "--activation_checkpoint.mode", p.recompute,
        "--checkpoint.enable",
        "--checkpoint.folder", checkpoint_dir,
    ]
    if p.precision == "fp8":
        args += ["--model.converters", "float8"]
    return args, []


def layout_args(flags: str, model: ModelSpec, p: ParallelismSpec,
                checkpoint_dir: str) -> tuple[list[str], list[EnvTriple]]:
    """Layout flags in the chosen style ('megatron', 'torchtitan' or 'none')."""
    if flags == "megatron":
        return megatron_args(model, p, checkpoint_dir)
    if flags == "torchtitan":
        return torchtitan_args(model, p, checkpoint_dir)
    if flags == "none":
        return [], []
    raise SpecError(f"unknown layout flag style '{flags}' (megatron, torchtitan, none)", path=("flags",))
