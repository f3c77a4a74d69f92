"""Read generated framework arguments back into the architecture and layout the framework will build, with the
framework's own defaults for every flag left out (Megatron-LM ``arguments.py``: learned absolute positions,
LayerNorm, GeLU, linear biases on, tied embeddings, one query group per head). A generated job is faithful when
``architecture(read back) == architecture(predicted model)``; the tests assert it for every catalog model.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from clustertwin.deploy.arch import DEFAULT_ROPE_BASE, Architecture
from clustertwin.deploy.layout_flags import TORCHTITAN_LLAMA3
from clustertwin.errors import SpecError
from clustertwin.specs.model import MoESpec

_MEGATRON_SWITCHES = frozenset({
    "--group-query-attention", "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
    "--sequence-parallel", "--use-distributed-optimizer", "--use-torch-fsdp2", "--bf16", "--fp16",
    "--exit-signal-handler", "--multi-latent-attention", "--checkpoint.enable", "--squared-relu",
})


@dataclass(frozen=True)
class ReadBack:
    """What a framework builds from the arguments: architecture and parallel layout."""

    arch: Architecture
    layout: dict[str, Any]
    """tp, pp, cp, ep, vpp, micro_batch, global_batch, zero, sequence_parallel, recompute."""


def _options(args: list[str] | tuple[str, ...]) -> dict[str, str | bool]:
    """``--flag value`` pairs and store-true switches (the ones listed as switches)."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            raise SpecError(f"unexpected argument {a!r} (not a --flag)")
        if a in _MEGATRON_SWITCHES or i + 1 >= len(args) or args[i + 1].startswith("--"):
            out[a] = True
            i += 1
        else:
            out[a] = args[i + 1]
            i += 2
    return out


def split_command(line: str) -> list[str]:
    """A shell command line (backslash continuations allowed) as words."""
    return shlex.split(line.replace("\\\n", " "))


def megatron(args: list[str] | tuple[str, ...]) -> ReadBack:
    """Megatron-LM ``pretrain_gpt.py`` arguments -> what Megatron builds."""
    o = _options(args)

    def num(flag: str, default: int | None = None) -> int:
        v = o.get(flag)
        if v is None:
            if default is None:
                raise SpecError(f"Megatron needs {flag}")
            return default
        return int(str(v))

    hidden, heads = num("--hidden-size"), num("--num-attention-heads")
    pos = str(o.get("--position-embedding-type", "learned_absolute"))
    experts = o.get("--num-experts")
    moe = None
    layers = num("--num-layers")
    if experts is not None:
        freq = o.get("--moe-layer-freq")
        moe_layers = _eval_freq(str(freq)) if freq else layers
        shared = num("--moe-shared-expert-intermediate-size", 0)
        ffn_e = num("--moe-ffn-hidden-size")
        groups = o.get("--moe-router-num-groups")
        cf = o.get("--moe-expert-capacity-factor")
        moe = MoESpec(experts=int(str(experts)), top_k=num("--moe-router-topk", 2), expert_ffn_hidden=ffn_e,
                      shared_experts=shared // ffn_e, moe_layers=moe_layers,
                      router_groups=None if groups is None else int(str(groups)),
                      node_groups=None if groups is None else num("--moe-router-group-topk"),
                      capacity_factor=None if cf is None else float(str(cf)))
    mla = "--multi-latent-attention" in o
    arch = Architecture(
        layers=layers, hidden=hidden, ffn_hidden=num("--ffn-hidden-size", 4 * hidden), heads=heads,
        kv_heads=num("--num-query-groups", 1) if "--group-query-attention" in o else heads,
        head_dim=num("--v-head-dim") if mla else num("--kv-channels", hidden // heads),
        seq_len=num("--seq-length"), vocab=num("--vocab-size"),
        ffn="swiglu" if "--swiglu" in o else ("relu" if "--squared-relu" in o else "gelu"),
        norm="rmsnorm" if o.get("--normalization", "LayerNorm") == "RMSNorm" else "layernorm",
        position_embedding="rope" if pos == "rope" else "learned",
        rope_base=float(str(o.get("--rotary-base", DEFAULT_ROPE_BASE))) if pos == "rope" else None,
        linear_bias="--disable-bias-linear" not in o,
        tied_embeddings="--untie-embeddings-and-output-weights" not in o,
        moe=moe, mla_kv_lora_rank=num("--kv-lora-rank") if mla else None,
        mla_rope_dim=num("--qk-pos-emb-head-dim") if mla else None)
    gran = o.get("--recompute-granularity")
    layout = {"tp": num("--tensor-model-parallel-size", 1), "pp": num("--pipeline-model-parallel-size", 1),
              "cp": num("--context-parallel-size", 1), "ep": num("--expert-model-parallel-size", 1),
              "vpp": (layers // (num("--pipeline-model-parallel-size", 1)
                                 * num("--num-layers-per-virtual-pipeline-stage")))
              if "--num-layers-per-virtual-pipeline-stage" in o else 1,
              "micro_batch": num("--micro-batch-size", 1), "global_batch": num("--global-batch-size"),
              "zero": 3 if "--use-torch-fsdp2" in o else (1 if "--use-distributed-optimizer" in o else 0),
              "sequence_parallel": "--sequence-parallel" in o,
              "recompute": str(gran) if gran else "none"}
    return ReadBack(arch, layout)


def _eval_freq(text: str) -> int:
    """MoE layers in Megatron's ``--moe-layer-freq`` list expression ``([0]*3+[1]*58)``."""
    total = 0
    for term in text.strip("()").split("+"):
        value, _, count = term.partition("*")
        if value.strip() == "[1]":
            total += int(count)
    return total


def _truth(v: str) -> bool:
    if v not in ("true", "false"):
        raise SpecError(f"expected true or false, got {v!r}")
    return v == "true"


def nemo(overrides: list[str] | tuple[str, ...]) -> ReadBack:
    """Megatron-Bridge ``key=value`` overrides -> what the recipe builds (every key must be present)."""
    kv = dict(o.split("=", 1) for o in overrides)

    def num(k: str, default: int | None = None) -> int:
        if k not in kv:
            if default is None:
                raise SpecError(f"missing override {k}")
            return default
        return int(kv[k])

    pos = kv["model.position_embedding_type"]
    moe = None
    if "model.num_moe_experts" in kv:
        ffn_e = num("model.moe_ffn_hidden_size")
        shared = kv.get("model.moe_shared_expert_intermediate_size", "null")
        freq = kv.get("model.moe_layer_freq")
        groups = kv.get("model.moe_router_num_groups")
        cf = kv.get("model.moe_expert_capacity_factor")
        moe = MoESpec(experts=num("model.num_moe_experts"), top_k=num("model.moe_router_topk"),
                      expert_ffn_hidden=ffn_e, shared_experts=0 if shared == "null" else int(shared) // ffn_e,
                      moe_layers=freq.count("1") if freq else num("model.num_layers"),
                      router_groups=None if groups is None else int(groups),
                      node_groups=None if groups is None else num("model.moe_router_group_topk"),
                      capacity_factor=None if cf is None else float(cf))
    arch = Architecture(
        layers=num("model.num_layers"), hidden=num("model.hidden_size"), ffn_hidden=num("model.ffn_hidden_size"),
        heads=num("model.num_attention_heads"), kv_heads=num("model.num_query_groups"),
        head_dim=num("model.kv_channels"), seq_len=num("model.seq_length"), vocab=num("model.vocab_size"),
        ffn="swiglu" if _truth(kv["model.gated_linear_unit"]) else "gelu",
        norm="rmsnorm" if kv["model.normalization"] == "RMSNorm" else "layernorm",
        position_embedding="rope" if pos == "rope" else "learned",
        rope_base=float(kv["model.rotary_base"]) if pos == "rope" else None,
        linear_bias=_truth(kv["model.add_bias_linear"]),
        tied_embeddings=_truth(kv["model.share_embeddings_and_output_weights"]), moe=moe,
        mla_kv_lora_rank=None, mla_rope_dim=None)
    layout = {"tp": num("model.tensor_model_parallel_size"), "pp": num("model.pipeline_model_parallel_size"),
              "cp": num("model.context_parallel_size"), "ep": num("model.expert_model_parallel_size"),
              "vpp": num("model.virtual_pipeline_model_parallel_size", 1),
              "micro_batch": num("train.micro_batch_size"), "global_batch": num("train.global_batch_size"),
              "zero": 3 if _truth(kv["ddp.use_megatron_fsdp"]) else int(_truth(kv["ddp.use_distributed_optimizer"])),
              "sequence_parallel": _truth(kv["model.sequence_parallel"]),
              "recompute": kv.get("model.recompute_granularity", "none")}
    return ReadBack(arch, layout)


def torchtitan(args: list[str] | tuple[str, ...]) -> ReadBack:
    """torchtitan options -> the flavor's architecture and the layout."""
    o = _options(args)
    flavor = TORCHTITAN_LLAMA3[str(o["--model.flavor"])]
    shard = int(str(o["--parallelism.data_parallel_shard_degree"]))
    replicate = int(str(o["--parallelism.data_parallel_replicate_degree"]))
    reshard = o.get("--parallelism.fsdp_reshard_after_forward")
    layout = {"tp": int(str(o["--parallelism.tensor_parallel_degree"])),
              "pp": int(str(o["--parallelism.pipeline_parallel_degree"])),
              "cp": int(str(o["--parallelism.context_parallel_degree"])),
              "ep": int(str(o.get("--parallelism.expert_parallel_degree", 1))), "dp": shard * replicate,
              "global_batch": int(str(o["--training.global_batch_size"])),
              "zero": 0 if shard == 1 and replicate > 1 else (2 if reshard == "never" else 3),
              "recompute": str(o["--activation_checkpoint.mode"])}
    return ReadBack(flavor.architecture(int(str(o["--training.seq_len"]))), layout)
