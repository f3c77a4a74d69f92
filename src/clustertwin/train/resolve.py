"""Layout defaults in one place: how a partly given layout is completed.

The CLI (``train estimate``), the sweep and the validate runner complete a layout with
:func:`resolve_parallelism`, so that they and the library agree:

* ``dp`` = GPUs / (tp x pp x cp) when not given (an error when it does not divide);
* ``sequence_parallel``: on when tp > 1 and the run's software stack has it
  (:func:`default_sequence_parallel`; Korthikanti et al. 2022: same communication volume, less
  activation memory);
* ``zero``: 1 (Megatron's distributed optimizer) when a data-parallel group exists and the stack has it,
  else 0 (:func:`default_zero`);
* the schedule follows ``vpp`` (``ParallelismSpec.pipeline_schedule``).

Fields that are given are never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.specs.loading import build
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.train.stack import Stack


def default_sequence_parallel(tp: int, stack: Stack | None = None) -> bool:
    """Sequence parallelism whenever there is a TP group (and ``stack``, if given, has it)."""
    return tp > 1 and (stack is None or stack.sequence_parallel)


def default_zero(dp: int, cp: int = 1, stack: Stack | None = None) -> int:
    """ZeRO-1 (distributed optimizer) whenever there is a data-parallel group (dp x cp > 1) and ``stack``
    (if given) runs it."""
    return 1 if dp * cp > 1 and (stack is None or 1 in stack.zero_stages) else 0


def resolve_parallelism(fields: Mapping[str, Any], gpus: int | None = None,
                        prefix: tuple[str, ...] = ("parallelism",), stack: Stack | None = None,
                        searched: bool = False) -> ParallelismSpec:
    """A ParallelismSpec from the given ``fields`` (ParallelismSpec names; None = not given) completed
    with the defaults of the module docstring on ``gpus`` GPUs for ``stack`` (the run's software stack,
    :func:`clustertwin.train.stack.resolve_stack`). SpecError on bad input. ``searched``: the fields not
    given are provisional: a search replaces them (:mod:`clustertwin.train.complete`), so a derived ``dp``
    that does not divide the global batch is not an error here (the search picks one that does)."""
    raw = {k: v for k, v in fields.items() if v is not None}
    tp, pp, cp = (int(raw.get(k, 1)) for k in ("tp", "pp", "cp"))
    derived = "dp" not in raw
    if derived:
        if gpus is None:
            raise SpecError("dp is not given and no GPU count to derive it from", path=(*prefix, "dp"))
        split = tp * pp * cp
        if split < 1 or gpus % split:
            raise SpecError(f"{gpus} GPUs are not divisible by tp x pp x cp = {split}", path=(*prefix, "dp"))
        raw["dp"] = gpus // split
    raw.setdefault("sequence_parallel", default_sequence_parallel(tp, stack))
    raw.setdefault("zero", default_zero(int(raw["dp"]), cp, stack))
    if searched and derived:
        dp = raw.pop("dp")
        return build(ParallelismSpec, raw, prefix=prefix).model_copy(update={"dp": dp})
    return build(ParallelismSpec, raw, prefix=prefix)
