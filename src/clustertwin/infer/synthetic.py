"""Synthetic request traces: Poisson, Gamma bursts and a diurnal sinusoid, with lognormal lengths and
optional shared prefixes.

Arrivals come from time rescaling (Cox/Lewis): with intensity ``λ(t) = rate·m(t)`` and cumulative
``Λ(t) = ∫λ``, points of a unit-mean renewal process ``u_k`` map to ``t_k = Λ⁻¹(u_k)``. The renewal
gaps are Gamma with shape ``burstiness`` (vLLM ``bench serve --burstiness``: 1 = Poisson, < 1 burstier
at short time scales). The rate multiplier ``m(t)`` (mean 1) is:

- ``poisson``: 1;
- ``bursty``: windows of ``window_s`` (60 s, the one-minute bins of the Azure trace analysis);
  ``n_b = max(1, round(burst_fraction·n))`` of the ``n`` windows, drawn at random, run at
  ``peak_to_mean`` P, the others at ``(n − n_b·P)/(n − n_b)`` so the mean stays 1 (peak-to-mean of window rates ≈ P, as measured: Azure code
  2023 4.16, conversation 1.54);
- ``diurnal``: ``exp(β·sin(2πt/period))/I₀(β)`` (a von Mises day), ``β`` solved so the peak-to-mean
  is ``P`` (``e^β/I₀(β) = P``; Azure 2024 weekday code ≈ 3.5, conversation ≈ 1.9).

Lengths are lognormal with the given means and coefficient of variation (0: fixed). With
``prefix_groups`` > 0 each request belongs to one of that many groups (uniformly) and its first
``prefix_tokens`` tokens are the group's shared prefix (system prompt / conversation history), written
as 512-token block ids like the Mooncake ``hash_ids``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.infer import inputs
from clustertwin.infer.traces import MOONCAKE_BLOCK_TOKENS, RequestTrace, TraceReport

KINDS = ("poisson", "bursty", "diurnal")
MAX_SYNTHETIC_REQUESTS = 20_000_000
"""Cap on generated requests (memory: ~40 B per request before prefixes)."""
MAX_TOKENS = 10_000_000
"""Cap on a mean length or a shared prefix, tokens (beyond any model's context)."""
MAX_PREFIX_BLOCKS = 50_000_000
"""Cap on prefix block ids held for a trace (requests × blocks per prompt)."""


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of a synthetic trace (see the module docstring)."""

    kind: str = "poisson"
    rate: float = 10.0
    """Mean requests/s."""
    duration_s: float = 600.0
    peak_to_mean: float = 4.0
    window_s: float = 60.0
    burst_fraction: float = 0.1
    period_s: float = 86_400.0
    burstiness: float = 1.0
    input_len: int = 1024
    output_len: int = 256
    length_cv: float = 0.0
    prefix_groups: int = 0
    prefix_tokens: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            from clustertwin.errors import did_you_mean

            raise SpecError(f"unknown synthetic kind '{self.kind}'{did_you_mean(self.kind, KINDS)} "
                            f"(choose from {', '.join(KINDS)})", path=("kind",))
        for name in ("rate", "duration_s", "window_s", "period_s", "burstiness"):
            inputs.positive(name, getattr(self, name), allow_none=False)
        inputs.non_negative("length_cv", self.length_cv)
        inputs.count("input_len", self.input_len)
        inputs.count("output_len", self.output_len)
        inputs.count("prefix_groups", self.prefix_groups, minimum=0)
        inputs.count("prefix_tokens", self.prefix_tokens, minimum=0)
        inputs.count("seed", self.seed, minimum=0)
        if not math.isfinite(self.peak_to_mean) or self.peak_to_mean < 1:
            raise SpecError(f"must be a finite number >= 1, got {self.peak_to_mean!r}", path=("peak_to_mean",))
        for name in ("input_len", "output_len", "prefix_tokens"):
            if getattr(self, name) > MAX_TOKENS:
                raise SpecError(f"must be <= {MAX_TOKENS:,} tokens, got {getattr(self, name):,}", path=(name,))
        if self.prefix_groups and self.prefix_tokens and \
                self.rate * self.duration_s * (max(self.input_len, self.prefix_tokens) / 512 + 1) > MAX_PREFIX_BLOCKS:
            raise SpecError(f"the prefix blocks of this trace would exceed {MAX_PREFIX_BLOCKS:,} ids; shorten it",
                            path=("prefix_tokens",))
        if self.duration_s / self.window_s > 1_000_000:
            raise SpecError(f"{self.duration_s:g} s in windows of {self.window_s:g} s is over a million windows",
                            path=("window_s",))
        if self.kind == "bursty":
            inputs.fraction("burst_fraction", self.burst_fraction)
            if self.burst_fraction * self.peak_to_mean >= 1:
                raise SpecError(f"burst_fraction x peak_to_mean must be < 1 to keep the mean rate, got "
                                f"{self.burst_fraction:g} x {self.peak_to_mean:g}", path=("burst_fraction",))
        if self.rate * self.duration_s > MAX_SYNTHETIC_REQUESTS:
            raise SpecError(f"rate x duration_s = {self.rate * self.duration_s:,.0f} requests exceeds the cap of "
                            f"{MAX_SYNTHETIC_REQUESTS:,}", path=("duration_s",))


def diurnal_beta(peak_to_mean: float) -> float:
    """``β`` with ``e^β / I₀(β) = peak_to_mean`` (bisection; the ratio rises monotonically from 1)."""
    lo, hi = 0.0, 1.0
    while math.exp(hi) / float(np.i0(hi)) < peak_to_mean:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if math.exp(mid) / float(np.i0(mid)) < peak_to_mean:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _multiplier(spec: SyntheticSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Grid times and the rate multiplier on it (piecewise constant on each grid step)."""
    T = spec.duration_s
    if spec.kind == "bursty":
        n_w = max(1, math.ceil(T / spec.window_s))
        n_b = max(1, round(spec.burst_fraction * n_w))
        if n_b * spec.peak_to_mean >= n_w:
            raise SpecError(f"a {T:g} s trace has {n_w} windows of {spec.window_s:g} s: too few for bursts at "
                            f"{spec.peak_to_mean:g}x the mean (needs more than {n_b * spec.peak_to_mean:g})",
                            path=("duration_s",))
        burst = np.zeros(n_w, dtype=bool)
        burst[rng.choice(n_w, n_b, replace=False)] = True
        low = (n_w - n_b * spec.peak_to_mean) / (n_w - n_b)
        m = np.where(burst, spec.peak_to_mean, low)
        grid = np.minimum(np.arange(n_w + 1) * spec.window_s, T)
        return grid, m
    n = max(1, min(200_000, math.ceil(T / 10.0)))
    grid = np.linspace(0.0, T, n + 1)
    if spec.kind == "poisson" or spec.peak_to_mean == 1:
        return grid, np.ones(n)
    beta = diurnal_beta(spec.peak_to_mean)
    mid = 0.5 * (grid[:-1] + grid[1:])
    return grid, np.exp(beta * np.sin(2 * math.pi * mid / spec.period_s)) / float(np.i0(beta))


def _lengths(rng: np.random.Generator, mean: int, cv: float, n: int) -> np.ndarray:
    if cv <= 0:
        return np.full(n, int(mean), dtype=np.int64)
    s2 = math.log1p(cv * cv)
    x = rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), n)
    return np.maximum(1, np.round(x)).astype(np.int64)


def generate(spec: SyntheticSpec) -> RequestTrace:
    """A synthetic :class:`RequestTrace` (deterministic for a seed)."""
    rng = np.random.default_rng(spec.seed)
    grid, m = _multiplier(spec, rng)
    cum = np.concatenate([[0.0], np.cumsum(spec.rate * m * np.diff(grid))])
    total = cum[-1]
    k = spec.burstiness
    n_draw = int(total + 6 * math.sqrt(total / k) + 16)
    u = np.cumsum(rng.gamma(k, 1.0 / k, n_draw))
    while u[-1] < total:  # rare: top up
        u = np.concatenate([u, u[-1] + np.cumsum(rng.gamma(k, 1.0 / k, n_draw // 4 + 16))])
    u = u[u < total]
    t = np.interp(u, cum, grid)
    n = len(t)
    if n == 0:
        raise SpecError("the synthetic trace has no requests: raise rate or duration_s")
    isl = _lengths(rng, spec.input_len, spec.length_cv, n)
    osl = _lengths(rng, spec.output_len, spec.length_cv, n)
    blocks = None
    if spec.prefix_groups > 0 and spec.prefix_tokens > 0:
        isl = np.maximum(isl, spec.prefix_tokens + 1)
        group = rng.integers(0, spec.prefix_groups, n)
        shared = spec.prefix_tokens // MOONCAKE_BLOCK_TOKENS
        nblocks = np.ceil(isl / MOONCAKE_BLOCK_TOKENS).astype(np.int64)
        nxt = spec.prefix_groups * (shared + 1)
        blocks = []
        for g, nb in zip(group.tolist(), nblocks.tolist(), strict=True):
            own = nb - shared
            blocks.append(tuple(range(g * shared, (g + 1) * shared)) + tuple(range(nxt, nxt + own)))
            nxt += own
    rep = TraceReport(f"synthetic:{spec.kind}", "synthetic", lines=n, requests=n)
    return RequestTrace(t - t[0], isl, osl, rep, blocks)
