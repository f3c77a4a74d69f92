"""Parallel layouts as numpy columns, so that one code path evaluates one layout or a million.

``Layouts`` holds one array per degree of freedom (all of equal length); ``Layouts.from_spec`` turns a
``ParallelismSpec`` into a batch of one. Recompute modes are coded ``RECOMPUTE_CODES``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from clustertwin.specs.parallelism import ParallelismSpec

#: recompute mode -> integer code used in the arrays
RECOMPUTE_CODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2}
RECOMPUTE_NAMES: dict[int, str] = {v: k for k, v in RECOMPUTE_CODES.items()}


@dataclass
class Layouts:
    """A batch of layouts (numpy int arrays of equal length; ``sp`` is 0/1)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vpp: np.ndarray
    mbs: np.ndarray
    recompute: np.ndarray
    zero: np.ndarray
    sp: np.ndarray

    @classmethod
    def from_spec(cls, p: ParallelismSpec) -> Layouts:
        """One layout as Python ints (the scalar fast path of the model functions)."""
        return cls(p.tp, p.pp, p.dp, p.cp, p.ep, p.vpp, p.micro_batch,  # type: ignore[arg-type]
                   RECOMPUTE_CODES[p.recompute], p.zero, int(p.sequence_parallel))

    @property
    def is_scalar(self) -> bool:
        return not isinstance(self.tp, np.ndarray)

    def __len__(self) -> int:
        return 1 if self.is_scalar else len(self.tp)

    @property
    def gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.dp * self.cp

    def as_arrays(self) -> Layouts:
        """The same layouts as numpy int arrays."""
        return Layouts(*(np.atleast_1d(np.asarray(getattr(self, f.name), dtype=np.int64)) for f in fields(self)))

    def take(self, idx) -> Layouts:
        """The layouts at ``idx`` (index array or boolean mask)."""
        return Layouts(*(getattr(self, f.name)[idx] for f in fields(self)))

    def spec(self, i: int, global_batch: int, precision: str) -> ParallelismSpec:
        """Layout ``i`` as a ParallelismSpec."""
        a = self.as_arrays() if self.is_scalar else self
        return a._spec(i, global_batch, precision)

    def _spec(self, i: int, global_batch: int, precision: str) -> ParallelismSpec:
        vpp = int(self.vpp[i])
        return ParallelismSpec(
            tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]), cp=int(self.cp[i]), ep=int(self.ep[i]),
            vpp=vpp, micro_batch=int(self.mbs[i]), global_batch=global_batch,
            sequence_parallel=bool(self.sp[i]), recompute=RECOMPUTE_NAMES[int(self.recompute[i])],  # type: ignore[arg-type]
            zero=int(self.zero[i]), precision=precision)  # type: ignore[arg-type]

    def row(self, i: int) -> dict[str, int | bool | str]:
        """Layout ``i`` as a flat dict (for tables and JSON)."""
        if self.is_scalar:
            return self.as_arrays().row(i)
        return {"tp": int(self.tp[i]), "pp": int(self.pp[i]), "dp": int(self.dp[i]), "cp": int(self.cp[i]),
                "ep": int(self.ep[i]), "vpp": int(self.vpp[i]), "micro_batch": int(self.mbs[i]),
                "recompute": RECOMPUTE_NAMES[int(self.recompute[i])], "zero": int(self.zero[i]),
                "sequence_parallel": bool(self.sp[i])}

LAYOUT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Layouts))


# Element-wise helpers that work on numpy arrays (search) and on Python scalars (one estimate, where
# numpy's per-call overhead would dominate): the same model code serves both.

def is_array(*xs) -> bool:
    return any(isinstance(x, np.ndarray) for x in xs)


def fmax(a, b):
    """Element-wise maximum."""
    if is_array(a, b):
        return np.maximum(a, b)
    return a if a >= b else b


def fmin(a, b):
    """Element-wise minimum."""
    if is_array(a, b):
        return np.minimum(a, b)
    return a if a <= b else b


def where(cond, a, b):
    """Element-wise ``a if cond else b``."""
    if is_array(cond, a, b):
        return np.where(cond, a, b)
    return a if cond else b


def ceil(x):
    return np.ceil(x) if is_array(x) else float(math.ceil(x))


def log2(x):
    return np.log2(x) if is_array(x) else math.log2(x)


def as_float(x):
    return x.astype(float) if is_array(x) else float(x)


def scalar(x, i: int = 0) -> float:
    """Element ``i`` of an array, or the scalar itself."""
    return float(x[i]) if is_array(x) and np.ndim(x) else float(x)
