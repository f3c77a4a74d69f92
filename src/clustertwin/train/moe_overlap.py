"""How the MoE dispatch/combine overlaps compute, and DualPipe's bubble (see :mod:`clustertwin.train.moe`).

**Overlap** (:data:`MOE_OVERLAPS`, a stack feature each):

* ``none``: exposed;
* ``shared_expert``: the forward dispatch runs alongside the shared experts
  (``--moe-shared-expert-overlap``): hidden up to the shared-expert forward + backward time;
* ``a2a``: 1F1B all-to-all overlap (``--overlap-moe-expert-parallel-comm``): one micro-batch's
  dispatch/combine runs under another's compute; hidden up to ``moe_a2a_overlap`` x the layer's compute,
  at ``overlap_interference`` seconds of slower compute per hidden second (the comm kernels hold SMs);
* ``dualpipe``: DeepSeek-V3's DualPipe overlaps forward and backward chunks of two micro-batches the
  same way; in addition its bubble is ``(p/2 - 1)(F&B + B - 3W)`` against 1F1B's ``(p - 1)(F + B)``
  (DeepSeek-AI 2024, Table 2) and each rank holds two copies of the stage's weights
  (:func:`dualpipe_bubble_factor`, :mod:`memory_moe`).
"""

from __future__ import annotations

from clustertwin.specs.model import ModelSpec
from clustertwin.train.layout import MOE_OVERLAP_CODES, Layouts, as_float, fmax, fmin, where
from clustertwin.train.params import TrainParams

#: overlap modes of the dispatch/combine all-to-all
MOE_OVERLAPS = ("none", "shared_expert", "a2a", "dualpipe")


def overlap_code(lay: Layouts, stack_overlaps: tuple[str, ...], has_shared: bool):
    """The layout's overlap code, ``auto`` (-1) resolved to the stack's best short of dualpipe."""
    if "a2a" in stack_overlaps:
        auto = MOE_OVERLAP_CODES["a2a"]
    elif "shared_expert" in stack_overlaps and has_shared:
        auto = MOE_OVERLAP_CODES["shared_expert"]
    else:
        auto = MOE_OVERLAP_CODES["none"]
    return where(lay.moe_overlap < 0, auto, lay.moe_overlap)


def ep_exposed(a2a_s, passes, code, compute_s, shared_s, params: TrainParams):
    """Exposed all-to-all seconds of one MoE layer and micro-batch over ``passes`` passes, and the
    compute slow-down of the overlapped part (module docstring)."""
    total = a2a_s * passes
    hide_ab = fmin(total, params.moe_a2a_overlap * compute_s)
    hide_sh = fmin(a2a_s, shared_s)  # forward dispatch/combine beside the shared experts
    hidden = where(code >= MOE_OVERLAP_CODES["a2a"], hide_ab,
                   where(code == MOE_OVERLAP_CODES["shared_expert"], hide_sh, 0.0))
    return total - hidden + params.overlap_interference * hidden


def dualpipe_bubble_factor(pp):
    """DualPipe bubble over the 1F1B bubble: ``(p/2 - 1)(F&B + B - 3W) / ((p - 1)(F + B))`` with the
    backward B = 2F split into input and weight gradients W = B/2 and F&B = F + B (one overlapped
    forward-backward pair): ``(p/2 - 1) / (p - 1) x 2/3`` (DeepSeek-AI 2024, Table 2)."""
    p = as_float(pp)
    return where(p > 1, fmax(p / 2 - 1, 0.0) / fmax(p - 1, 1.0) * (2.0 / 3.0), 1.0)


def overlap_violation(stack_name: str, stack_overlaps: tuple[str, ...], mode: str, model: ModelSpec,
                      pp: int) -> str | None:
    """Why an explicit ``moe_overlap`` cannot run (None when it can): the stack lacks it, DualPipe needs
    an even pipeline of at least 2 stages, shared-expert overlap needs shared experts."""
    if mode in ("auto", "none"):
        return None
    if not model.moe:
        return f"moe_overlap '{mode}' needs an MoE model"
    if mode not in stack_overlaps:
        having = [s for s in STACKS_WITH_OVERLAP if mode in STACKS_WITH_OVERLAP[s]]
        return (f"software stack {stack_name} has no MoE overlap '{mode}' (it runs: {', '.join(stack_overlaps)}); "
                f"stacks that do: {', '.join(having)}")
    if mode == "dualpipe" and (pp < 2 or pp % 2):
        return f"DualPipe needs an even number of pipeline stages >= 2 (pp={pp})"
    if mode == "shared_expert" and not model.moe.shared_experts:
        return "moe_overlap 'shared_expert' needs shared experts (moe.shared_experts > 0)"
    return None


def _stacks_with_overlap() -> dict[str, tuple[str, ...]]:
    from clustertwin.train.stack import STACKS

    return {name: st.moe_overlaps for name, st in STACKS.items()}


STACKS_WITH_OVERLAP = _stacks_with_overlap()
