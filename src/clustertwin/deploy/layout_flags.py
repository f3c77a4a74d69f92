"""Layout and architecture flags for the training script: the ParallelismSpec and the model's architecture
as Megatron-LM arguments, NeMo/Megatron-Bridge overrides or torchtitan options. Each builder returns
``(args, env)``: an argument list (unquoted; the renderers quote it for their target) and ``(name, value, why)``
environment variables the framework needs.

Flag names: Megatron-LM ``megatron/training/arguments.py`` (core 0.9+); Megatron-Bridge/NeMo 2 ``ConfigContainer``
overrides in Hydra syntax (``model.*`` are megatron.core ``TransformerConfig``/``GPTModelProvider`` fields,
``train.*``, ``ddp.*``, ``optimizer.*``, ``checkpoint.*``); torchtitan's ``JobConfig`` sections (``--model.*``,
``--parallelism.*``, ``--training.*``, ``--activation_checkpoint.*``, ``--checkpoint.*``), 2025 layout.

Not every framework has every ZeRO stage (:func:`framework_layout`): Megatron's distributed optimizer shards the
optimizer states and reduce-scatters gradients into a full-size gradient buffer (ZeRO-1), and torch FSDP2
(``--use-torch-fsdp2``) shards parameters too (ZeRO-3), so ZeRO-2 becomes ZeRO-1 there; torchtitan shards with
FSDP2 only, where ``fsdp_reshard_after_forward=never`` keeps parameters gathered from forward through backward
(ZeRO-2, PyTorch's SHARD_GRAD_OP) and ``always`` reshards them (ZeRO-3), so ZeRO-1 becomes ZeRO-2.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.deploy.arch import Architecture, architecture
from clustertwin.deploy.pipeline_flags import megatron_pipeline_args, nemo_pipeline_overrides
from clustertwin.errors import SpecError
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec

EnvTriple = tuple[str, str, str]
FRAMEWORK_NAME = {"megatron": "Megatron-LM", "nemo": "NeMo/Megatron-Bridge", "torchtitan": "torchtitan"}

_TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16", "fp32": "float32", "tf32": "float32"}
MIXED_PRECISION = {"bf16": "bf16_mixed", "fp8": "bf16_with_fp8_delayed_scaling_mixed", "fp16": "fp16_mixed"}
"""Megatron-Bridge mixed-precision recipe names (fp32/tf32: none, the model's own dtype)."""
ZERO_STAGES: dict[str, dict[int, int]] = {
    "megatron": {0: 0, 1: 1, 2: 1, 3: 3},
    "nemo": {0: 0, 1: 1, 2: 1, 3: 3},
    "torchtitan": {0: 0, 1: 2, 2: 2, 3: 3},
}
"""Requested ZeRO stage -> the stage the framework runs (see the module docstring)."""


@dataclass(frozen=True)
class TorchtitanFlavor:
    """A registered torchtitan llama3 flavor (``torchtitan/models/llama3/__init__.py``)."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim_multiplier: float
    multiple_of: int
    rope_theta: float = 500000.0
    vocab_size: int = 128256

    @property
    def ffn_hidden(self) -> int:
        """torchtitan's FeedForward width: ``multiple_of * ceil(ffn_dim_multiplier * int(2 * 4 dim / 3) /
        multiple_of)`` (8B: 14336, 70B: 28672, 405B: 53248)."""
        h = int(self.ffn_dim_multiplier * int(2 * 4 * self.dim / 3))
        return self.multiple_of * (-(-h // self.multiple_of))

    def architecture(self, seq_len: int) -> Architecture:
        return Architecture(layers=self.n_layers, hidden=self.dim, ffn_hidden=self.ffn_hidden, heads=self.n_heads,
                            kv_heads=self.n_kv_heads, head_dim=self.dim // self.n_heads, seq_len=seq_len,
                            vocab=self.vocab_size, ffn="swiglu", norm="rmsnorm", position_embedding="rope",
                            rope_base=self.rope_theta, linear_bias=False, tied_embeddings=False, moe=None,
                            mla_kv_lora_rank=None, mla_rope_dim=None)


TORCHTITAN_LLAMA3 = {
    "8B": TorchtitanFlavor(4096, 32, 32, 8, 1.3, 1024),
    "70B": TorchtitanFlavor(8192, 80, 64, 8, 1.3, 4096),
    "405B": TorchtitanFlavor(16384, 126, 128, 8, 1.2, 4096),
}


def framework_layout(flags: str, p: ParallelismSpec, strict: bool = False) -> tuple[ParallelismSpec, list[str]]:
    """The layout the framework will run and a warning per change (``strict``: refuse instead of mapping)."""
    warnings: list[str] = []
    if flags == "torchtitan" and (p.first_stage_layers or p.last_stage_layers or p.embedding_in_split
                                  or p.loss_in_split or p.pipeline_layout):
        msg = ("torchtitan splits the layers over its pipeline stages by its own rule: the stage plan (first/last "
               "stage layers, embedding/loss slots, layout string) is not passed and the twin predicts the "
               "balanced plan")
        if strict:
            raise SpecError(f"{msg} (--strict refuses the change)", path=("parallelism", "pipeline_layout"))
        p = p.model_copy(update={"first_stage_layers": None, "last_stage_layers": None, "embedding_in_split": False,
                                 "loss_in_split": False, "pipeline_layout": None})
        warnings.append(msg)
    stages = ZERO_STAGES.get(flags)
    if stages is None or stages[p.zero] == p.zero:
        return p, warnings
    z = stages[p.zero]
    name = FRAMEWORK_NAME[flags]
    why = {1: "its distributed optimizer shards optimizer states only (ZeRO-1)",
           2: "FSDP2 without resharding after forward is its nearest mode (ZeRO-2)"}[z]
    msg = f"zero={p.zero} does not exist in {name}; the job runs zero={z}: {why}"
    if strict:
        raise SpecError(f"{msg} (--strict refuses the change; give --zero {z})", path=("parallelism", "zero"))
    return p.model_copy(update={"zero": z}), [*warnings, msg]


def _megatron_arch(a: Architecture) -> list[str]:
    args = [
        "--num-layers", str(a.layers), "--hidden-size", str(a.hidden), "--ffn-hidden-size", str(a.ffn_hidden),
        "--num-attention-heads", str(a.heads), "--seq-length", str(a.seq_len),
        "--max-position-embeddings", str(a.seq_len), "--vocab-size", str(a.vocab),
    ]
    if a.head_dim * a.heads != a.hidden:
        args += ["--kv-channels", str(a.head_dim)]
    if a.kv_heads != a.heads:
        args += ["--group-query-attention", "--num-query-groups", str(a.kv_heads)]
    if a.position_embedding == "rope":
        args += ["--position-embedding-type", "rope", "--rotary-base", f"{a.rope_base:g}"]
    else:
        args += ["--position-embedding-type", "learned_absolute"]
    args += ["--normalization", "RMSNorm" if a.norm == "rmsnorm" else "LayerNorm"]
    if a.ffn == "swiglu":
        args.append("--swiglu")
    elif a.ffn == "relu":
        raise SpecError("Megatron-LM has no plain-ReLU FFN flag (only --swiglu, --squared-relu, default GeLU)",
                        path=("model", "ffn"))
    if not a.linear_bias:
        args.append("--disable-bias-linear")
    if not a.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if a.mla_kv_lora_rank is not None:
        args += ["--multi-latent-attention", "--kv-lora-rank", str(a.mla_kv_lora_rank),
                 "--qk-pos-emb-head-dim", str(a.mla_rope_dim or 0), "--v-head-dim", str(a.head_dim)]
    if a.moe is not None:
        args += ["--num-experts", str(a.moe.experts), "--moe-router-topk", str(a.moe.top_k),
                 "--moe-ffn-hidden-size", str(a.moe.expert_ffn_hidden)]
        if a.moe.shared_experts:
            args += ["--moe-shared-expert-intermediate-size", str(a.moe.shared_experts * a.moe.expert_ffn_hidden)]
        moe_layers = a.moe.moe_layers or a.layers
        if moe_layers < a.layers:  # the first layers dense (DeepSeek-V3: 3 of 61)
            args += ["--moe-layer-freq", f"([0]*{a.layers - moe_layers}+[1]*{moe_layers})"]
        if a.moe.router_groups and a.moe.node_groups:  # group-limited routing (DeepSeek-V3: 4 of 8 groups)
            args += ["--moe-router-num-groups", str(a.moe.router_groups),
                     "--moe-router-group-topk", str(a.moe.node_groups)]
        if a.moe.capacity_factor is not None:
            args += ["--moe-expert-capacity-factor", f"{a.moe.capacity_factor:g}"]
    return args


def megatron_args(model: ModelSpec, p: ParallelismSpec, checkpoint_dir: str) -> tuple[list[str], list[EnvTriple]]:
    """Megatron-LM ``pretrain_gpt.py`` arguments for the layout and the model's architecture."""
    p, _ = framework_layout("megatron", p)
    args = [
        "--tensor-model-parallel-size", str(p.tp),
        "--pipeline-model-parallel-size", str(p.pp),
        "--context-parallel-size", str(p.cp),
    ]
    args += megatron_pipeline_args(model, p)
    if p.sequence_parallel:
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(p.micro_batch), "--global-batch-size", str(p.global_batch)]
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if p.zero == 3:
        args.append("--use-torch-fsdp2")
    elif p.zero == 1:
        args.append("--use-distributed-optimizer")
    if p.precision in ("bf16", "fp8"):
        args.append("--bf16")
    elif p.precision == "fp16":
        args.append("--fp16")
    if p.precision == "fp8":
        args += ["--fp8-format", "hybrid"]
    args += _megatron_arch(architecture(model))
    if model.moe is not None:
        args += ["--expert-model-parallel-size", str(p.ep)]
    args += ["--save", checkpoint_dir, "--load", checkpoint_dir, "--exit-signal-handler"]
    env = [("CUDA_DEVICE_MAX_CONNECTIONS", "1",
            "Megatron: one hardware queue keeps TP communication ordered ahead of compute (overlap)")]
    return args, env


def _b(v: bool) -> str:
    return "true" if v else "false"


def nemo_overrides(model: ModelSpec, p: ParallelismSpec, checkpoint_dir: str) -> tuple[list[str], list[EnvTriple]]:
    """Megatron-Bridge (NeMo 2) recipe overrides, ``key=value`` in Hydra syntax, for layout and architecture."""
    p, _ = framework_layout("nemo", p)
    a = architecture(model)
    if a.ffn == "relu":
        raise SpecError("Megatron-Bridge has no plain-ReLU FFN override", path=("model", "ffn"))
    ov = {
        "model.tensor_model_parallel_size": p.tp, "model.pipeline_model_parallel_size": p.pp,
        "model.context_parallel_size": p.cp, "model.expert_model_parallel_size": p.ep,
        "model.sequence_parallel": _b(p.sequence_parallel),
    }
    ov |= nemo_pipeline_overrides(model, p)
    if p.recompute != "none":
        ov["model.recompute_granularity"] = p.recompute
        if p.recompute == "full":
            ov |= {"model.recompute_method": "uniform", "model.recompute_num_layers": 1}
    ov |= {
        "model.num_layers": a.layers, "model.hidden_size": a.hidden, "model.ffn_hidden_size": a.ffn_hidden,
        "model.num_attention_heads": a.heads, "model.num_query_groups": a.kv_heads, "model.kv_channels": a.head_dim,
        "model.seq_length": a.seq_len, "model.vocab_size": a.vocab,
        "model.normalization": "RMSNorm" if a.norm == "rmsnorm" else "LayerNorm",
        "model.gated_linear_unit": _b(a.ffn == "swiglu"), "model.add_bias_linear": _b(a.linear_bias),
        "model.position_embedding_type": "rope" if a.position_embedding == "rope" else "learned_absolute",
        "model.share_embeddings_and_output_weights": _b(a.tied_embeddings),
    }
    if a.rope_base is not None:
        ov["model.rotary_base"] = f"{a.rope_base:g}"
    if a.moe is not None:
        ov |= {"model.num_moe_experts": a.moe.experts, "model.moe_router_topk": a.moe.top_k,
               "model.moe_ffn_hidden_size": a.moe.expert_ffn_hidden,
               "model.moe_shared_expert_intermediate_size": a.moe.shared_experts * a.moe.expert_ffn_hidden or "null"}
        dense = a.layers - (a.moe.moe_layers or a.layers)
        if dense:
            ov["model.moe_layer_freq"] = "[" + ",".join(["0"] * dense + ["1"] * (a.layers - dense)) + "]"
        if a.moe.router_groups and a.moe.node_groups:
            ov |= {"model.moe_router_num_groups": a.moe.router_groups, "model.moe_router_group_topk": a.moe.node_groups}
        if a.moe.capacity_factor is not None:
            ov["model.moe_expert_capacity_factor"] = f"{a.moe.capacity_factor:g}"
    distributed = _b(p.zero == 1)
    ov |= {"train.micro_batch_size": p.micro_batch, "train.global_batch_size": p.global_batch,
           "ddp.use_distributed_optimizer": distributed, "optimizer.use_distributed_optimizer": distributed,
           "ddp.use_megatron_fsdp": _b(p.zero == 3),
           "checkpoint.save": checkpoint_dir, "checkpoint.load": checkpoint_dir}
    if p.precision in MIXED_PRECISION:
        ov["mixed_precision"] = MIXED_PRECISION[p.precision]
    env = [("CUDA_DEVICE_MAX_CONNECTIONS", "1",
            "Megatron-core: one hardware queue keeps TP communication ordered ahead of compute (overlap)")]
    return [f"{k}={v}" for k, v in ov.items()], env


def torchtitan_flavor(model: ModelSpec) -> str:
    """The registered torchtitan llama3 flavor with exactly this architecture (else a SpecError naming the
    nearest one: torchtitan builds only registered flavors)."""
    a = architecture(model)
    for name, fl in TORCHTITAN_LLAMA3.items():
        if fl.architecture(a.seq_len) == a:
            return name
    nearest = min(TORCHTITAN_LLAMA3, key=lambda n: abs(TORCHTITAN_LLAMA3[n].dim - a.hidden))
    fl = TORCHTITAN_LLAMA3[nearest]
    diff = [f"{k} {getattr(a, k)} vs {getattr(fl.architecture(a.seq_len), k)}" for k in Architecture.__dataclass_fields__
            if getattr(a, k) != getattr(fl.architecture(a.seq_len), k)]
    raise SpecError(f"torchtitan has no llama3 flavor with this architecture (nearest {nearest}: "
                    f"{', '.join(diff[:4])}); register one in torchtitan/models/llama3 or use --flags megatron",
                    path=("model",))


def torchtitan_args(model: ModelSpec, p: ParallelismSpec, checkpoint_dir: str) -> tuple[list[str], list[EnvTriple]]:
    """torchtitan ``train.py`` overrides (``--section.key value``) for the model flavor and the layout."""
    p, _ = framework_layout("torchtitan", p)
    flavor = torchtitan_flavor(model)
    shard, replicate = (p.dp, 1) if p.zero >= 2 else (1, p.dp)
    args = [
        "--model.name", "llama3", "--model.flavor", flavor,
        "--parallelism.tensor_parallel_degree", str(p.tp),
        "--parallelism.pipeline_parallel_degree", str(p.pp),
        "--parallelism.context_parallel_degree", str(p.cp),
        "--parallelism.data_parallel_shard_degree", str(shard),
        "--parallelism.data_parallel_replicate_degree", str(replicate),
    ]
    if p.zero >= 2:
        args += ["--parallelism.fsdp_reshard_after_forward", "always" if p.zero == 3 else "never"]
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
    """Layout flags in the chosen style ('megatron', 'nemo', 'torchtitan' or 'none')."""
    if flags == "megatron":
        return megatron_args(model, p, checkpoint_dir)
    if flags == "nemo":
        return nemo_overrides(model, p, checkpoint_dir)
    if flags == "torchtitan":
        return torchtitan_args(model, p, checkpoint_dir)
    if flags == "none":
        return [], []
    raise SpecError(f"unknown layout flag style '{flags}' (megatron, nemo, torchtitan, none)", path=("flags",))
