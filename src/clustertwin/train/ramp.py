"""A batch-size ramp at the start of a run: the tokens it costs beyond the steady steps.

Large runs start with a smaller global batch and raise it (DeepSeek-V3, DeepSeek-AI 2024 section 4.2: "the
batch size is gradually increased from 3072 to 15360 in the training of the first 469B tokens, and then
keeps 15360"; GPT-3, Brown et al. 2020 appendix B: a linear ramp from 32k tokens over the first 4-12B
tokens). With the layout unchanged, a smaller batch means fewer micro-batches per step, so the pipeline
bubble and the per-step costs (gradient reduction, optimizer) weigh more per token. The ramp is taken as a
linear rise of the batch over ``ramp_tokens``, split into ``segments`` equal token shares, each at its
midpoint batch ``b_i`` (rounded down to a multiple of dp x micro-batch, the smallest batch the layout
runs) with throughput ``r_i``; it takes as long as

    equivalent = sum_i (ramp_tokens / n) x r_final / r_i

tokens at the final batch's throughput ``r_final`` (>= ramp_tokens). The layout is the final one throughout
(the published runs name one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec, ModelSpec, ParallelismSpec
from clustertwin.train.estimate import TrainEstimate, estimate
from clustertwin.train.params import TrainParams

#: token shares the ramp is split into
RAMP_SEGMENTS = 8


@dataclass(frozen=True)
class BatchRamp:
    """The ramp's cost: ``equivalent_tokens`` at the final throughput for the ``ramp_tokens`` it trains."""

    start_batch: int
    ramp_tokens: float
    equivalent_tokens: float
    batches: tuple[int, ...]
    """midpoint batch of each segment"""

    @property
    def extra_tokens(self) -> float:
        """Tokens of steady training the ramp's slower steps are worth (>= 0)."""
        return self.equivalent_tokens - self.ramp_tokens


def batch_ramp(model: ModelSpec, cluster: ClusterSpec, final: TrainEstimate, par: ParallelismSpec,
               start_batch: int, ramp_tokens: float, *, params: TrainParams | None = None,
               segments: int = RAMP_SEGMENTS) -> BatchRamp:
    """The :class:`BatchRamp` of a run whose global batch rises linearly from ``start_batch`` to
    ``par.global_batch`` over ``ramp_tokens`` (module docstring); ``final`` is the estimate of ``par``'s
    completed layout at the final batch (``final.layout`` is kept at every batch)."""
    if not 0 < start_batch <= par.global_batch:
        raise SpecError(f"start batch {start_batch} must be in 1 .. the global batch {par.global_batch}",
                        path=("batch_ramp", "start_batch"))
    if not ramp_tokens > 0:
        raise SpecError("must be > 0 tokens", path=("batch_ramp", "tokens"))
    layout = {k: v for k, v in final.layout.items() if v is not None}
    base = par.model_copy(update=layout)
    step = base.dp * base.micro_batch
    final_rate = estimate(model, cluster, base, params=params).tokens_per_s  # as the segments are timed
    batches, equivalent = [], 0.0
    for i in range(segments):
        b = start_batch + (par.global_batch - start_batch) * (i + 0.5) / segments
        b = max(step, int(b) // step * step)
        rate = estimate(model, cluster, base.model_copy(update={"global_batch": b}), params=params).tokens_per_s
        batches.append(b)
        equivalent += ramp_tokens / segments * final_rate / rate
    return BatchRamp(start_batch, float(ramp_tokens), equivalent, tuple(batches))


def parse_batch_ramp(text: str, option: str = "--batch-ramp") -> tuple[int, float]:
    """``START,TOKENS`` (e.g. ``3072,469e9``) as (start batch, ramp tokens); SpecError naming ``option``."""
    parts = [x.strip() for x in str(text).split(",")]
    try:
        if len(parts) != 2:
            raise ValueError
        start, tokens = int(parts[0]), float(parts[1])
    except ValueError:
        raise SpecError(f"{option} {str(text)[:40]!r}: expected START,TOKENS (sequences, tokens), e.g. 3072,469e9"
                        ) from None
    if start < 1 or not math.isfinite(tokens) or tokens <= 0:
        raise SpecError(f"{option} {str(text)[:40]!r}: START must be >= 1 and TOKENS a finite number > 0")
    return start, tokens
