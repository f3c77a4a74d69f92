"""Keys a query attends to, averaged over a model's layers: the physics of the attention core (sliding
windows, the causal mask) and the span a FLOP convention counts (:mod:`clustertwin.train.flops`)."""

from __future__ import annotations

from clustertwin.specs.model import ModelSpec


def windowed_fraction(model: ModelSpec) -> float:
    """Fraction of the layers that attend over ``attention_window`` only: all of them, or ``1 - 1/n``
    with ``full_attention_every`` n (GPT-OSS n = 2: alternating sliding/full layers)."""
    if not model.attention_window:
        return 0.0
    n = model.full_attention_every
    return 1.0 - 1.0 / n if n else 1.0


def attention_span(model: ModelSpec, seq_len: int) -> float:
    """Keys a query attends to, averaged over the layers: the sequence on full-attention layers, the
    sliding window (when shorter) on windowed ones (``full_attention_every``)."""
    wf = windowed_fraction(model)
    if not wf:
        return seq_len
    return (1.0 - wf) * seq_len + wf * min(seq_len, model.attention_window or seq_len)


def causal_span(model: ModelSpec, seq_len: int) -> float:
    """Keys a query's score blocks actually cover under the causal mask, averaged over the layers: half the
    sequence on a full-attention layer, the window ``w`` (``w (1 - w / 2s)`` exactly) on a windowed layer
    (flash kernels skip the masked blocks)."""
    wf = windowed_fraction(model)
    w = min(seq_len, model.attention_window or seq_len)
    return (1.0 - wf) * 0.5 * seq_len + wf * w * (1.0 - 0.5 * w / seq_len)


def counted_span(model: ModelSpec, seq_len: int, causal: bool, windows: bool = True) -> float:
    """Keys per query a FLOP convention counts: :func:`causal_span` (``causal``) or :func:`attention_span`;
    without ``windows`` every layer over the whole sequence (s/2 causal), as a formula blind to windows."""
    if windows:
        return causal_span(model, seq_len) if causal else attention_span(model, seq_len)
    return 0.5 * seq_len if causal else float(seq_len)
