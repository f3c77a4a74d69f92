"""Megatron-Core pipeline layout strings (``--pipeline-model-parallel-layout``), e.g. DeepSeek-V3's
``Et*3|(tt|)*29m|L`` or Llama 3's ``Et*7|(t*8|)*14t*7L``.

Grammar: ``E`` the embedding, ``t`` a transformer layer, ``m`` a multi-token-prediction layer (costed
as a transformer layer), ``L`` the output layer and loss, ``|`` ends a virtual pipeline chunk, ``X*N``
repeats an item N times and ``( ... )`` groups items; spaces and commas are ignored. The string holds
``pp x vpp`` chunks; chunk ``j`` runs on stage ``j mod pp`` (Megatron's interleaved placement). The
embedding must open the first chunk and the loss close the last.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError

PATH = ("parallelism", "pipeline_layout")


@dataclass(frozen=True)
class ParsedLayout:
    """Layers per pipeline stage of a layout string."""

    stage_layers: tuple[int, ...]

    @property
    def first(self) -> int:
        return self.stage_layers[0]

    @property
    def last(self) -> int:
        return self.stage_layers[-1]

    @property
    def middle_max(self) -> int:
        return max(self.stage_layers[1:-1], default=0)


def _expand(text: str) -> list[str]:
    s = "".join(ch for ch in text if not ch.isspace() and ch != ",")
    pos = 0

    def number() -> int:
        nonlocal pos
        start = pos
        while pos < len(s) and s[pos].isdigit():
            pos += 1
        if start == pos:
            raise SpecError(f"pipeline layout {text!r}: expected a count after '*' at position {start}", path=PATH)
        return int(s[start:pos])

    def seq(closing: bool) -> list[str]:
        nonlocal pos
        out: list[str] = []
        while pos < len(s):
            ch = s[pos]
            if ch == ")":
                if not closing:
                    raise SpecError(f"pipeline layout {text!r}: unmatched ')' at position {pos}", path=PATH)
                pos += 1
                return out
            if ch == "(":
                pos += 1
                item = seq(True)
            elif ch in "EtmL|":
                pos += 1
                item = [ch]
            else:
                raise SpecError(f"pipeline layout {text!r}: unexpected {ch!r} at position {pos} (expected E, t, m, "
                                "L, |, *N or parentheses)", path=PATH)
            if pos < len(s) and s[pos] == "*":
                pos += 1
                item = item * number()
            out += item
        if closing:
            raise SpecError(f"pipeline layout {text!r}: missing ')'", path=PATH)
        return out

    return seq(False)


def parse_pipeline_layout(text: str, pp: int, vpp: int, layers: int) -> ParsedLayout:
    """Layers per stage of ``text`` for ``pp`` stages of ``vpp`` chunks and a ``layers``-layer model;
    SpecError naming what does not match."""
    tokens = _expand(text)
    chunks: list[list[str]] = [[]]
    for tok in tokens:
        if tok == "|":
            chunks.append([])
        else:
            chunks[-1].append(tok)
    if chunks and not chunks[-1] and len(chunks) > 1:
        chunks.pop()  # a trailing '|'
    if len(chunks) != pp * vpp:
        raise SpecError(f"pipeline layout {text!r} has {len(chunks)} chunks; pp x vpp = {pp} x {vpp} needs "
                        f"{pp * vpp}", path=PATH)
    n_layers = sum(tok in "tm" for tok in tokens)
    if n_layers != layers:
        raise SpecError(f"pipeline layout {text!r} places {n_layers} layers; the model has {layers}", path=PATH)
    if tokens.count("E") != 1 or chunks[0][:1] != ["E"]:
        raise SpecError(f"pipeline layout {text!r}: the embedding 'E' must open the first chunk, once", path=PATH)
    if tokens.count("L") != 1 or chunks[-1][-1:] != ["L"]:
        raise SpecError(f"pipeline layout {text!r}: the loss 'L' must close the last chunk, once", path=PATH)
    stages = [0] * pp
    for j, chunk in enumerate(chunks):
        stages[j % pp] += sum(tok in "tm" for tok in chunk)
    return ParsedLayout(tuple(stages))
