"""Megatron-Core pipeline layout strings (``--pipeline-model-parallel-layout``), e.g. DeepSeek-V3's
``Et*3|(tt|)*29m|L`` or Llama 3's ``Et*7|(t*8|)*14t*7L``.

Grammar: ``E`` the embedding, ``t`` a transformer layer, ``m`` a multi-token-prediction layer (costed
as a transformer layer), ``L`` the output layer and loss, ``|`` ends a virtual pipeline chunk, ``X*N``
repeats an item N times and ``( ... )`` groups items; spaces and commas are ignored. The string holds
``pp x vpp`` chunks; chunk ``j`` runs on stage ``j mod pp`` (Megatron's interleaved placement). The
embedding must open the first chunk and the loss close the last.

Work caps (a string of a few characters can stand for billions of items, ``((t|)*1000)*10000``): the
string is parsed into a tree first, at most :data:`MAX_LAYOUT_CHARS` characters, :data:`MAX_LAYOUT_DEPTH`
nested parentheses and repeat counts up to :data:`MAX_LAYOUT_ITEMS`. The counts of chunks, layers,
``E`` and ``L`` are computed from the tree (multiplying the repeat counts, exact integers, nothing
expanded) and checked against ``pp x vpp``, the model's layers and :data:`MAX_LAYOUT_ITEMS`; only a
string that passes is expanded, so the expansion never holds more than ``layers + pp x vpp + 2`` items.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError

PATH = ("parallelism", "pipeline_layout")
MAX_LAYOUT_CHARS = 65_536
"""Longest layout string read (a fully written-out 1,000-chunk layout takes about 6,000 characters)."""
MAX_LAYOUT_DEPTH = 32
"""Deepest nesting of parentheses."""
MAX_LAYOUT_ITEMS = 1_000_000
"""Most items (``E``, ``t``, ``m``, ``L``, ``|``) a layout may expand to, and the largest repeat count."""
_MAX_COUNT_DIGITS = len(str(MAX_LAYOUT_ITEMS))


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

    @property
    def columns(self) -> tuple[int, int, int, int]:
        """``(first, last, mid, from_string)`` columns of :class:`clustertwin.train.layout.Layouts`."""
        return self.first, self.last, self.middle_max, 1


@dataclass(frozen=True)
class LayoutCounts:
    """What a layout string expands to, computed from its tree without expanding it: ``items`` in all,
    ``bars`` (``|``), ``layers`` (``t`` and ``m``), ``emb`` (``E``), ``loss`` (``L``) and the last item
    (``""`` when empty)."""

    items: int = 0
    bars: int = 0
    layers: int = 0
    emb: int = 0
    loss: int = 0
    last: str = ""

    def then(self, other: LayoutCounts) -> LayoutCounts:
        """This sequence followed by ``other``."""
        return LayoutCounts(self.items + other.items, self.bars + other.bars, self.layers + other.layers,
                            self.emb + other.emb, self.loss + other.loss, other.last or self.last)

    def times(self, n: int) -> LayoutCounts:
        """This sequence repeated ``n`` times."""
        if n == 0:
            return LayoutCounts()
        return LayoutCounts(self.items * n, self.bars * n, self.layers * n, self.emb * n, self.loss * n, self.last)

    @property
    def chunks(self) -> int:
        """Chunks: one more than the ``|`` separators, a trailing ``|`` closing the last chunk."""
        return self.bars + 1 - (1 if self.last == "|" else 0)


_ONE = {"E": LayoutCounts(1, emb=1, last="E"), "t": LayoutCounts(1, layers=1, last="t"),
        "m": LayoutCounts(1, layers=1, last="m"), "L": LayoutCounts(1, loss=1, last="L"),
        "|": LayoutCounts(1, bars=1, last="|")}

Tree = list[tuple["str | Tree", int]]
"""A parsed sequence: (an item letter or a group, repeat count) pairs."""


def _parse(text: str) -> Tree:
    """The layout's tree; SpecError for a syntax error, a nesting deeper than :data:`MAX_LAYOUT_DEPTH` or a
    repeat count above :data:`MAX_LAYOUT_ITEMS`."""
    if len(text) > MAX_LAYOUT_CHARS:
        raise SpecError(f"pipeline layout of {len(text):,} characters is longer than the cap of "
                        f"{MAX_LAYOUT_CHARS:,}", path=PATH)
    s = "".join(ch for ch in text if not ch.isspace() and ch != ",")
    shown = text if len(text) <= 60 else text[:57] + "..."
    root: Tree = []
    stack: list[Tree] = [root]
    pos = 0
    while pos < len(s):
        ch = s[pos]
        pos += 1
        if ch == "(":
            if len(stack) > MAX_LAYOUT_DEPTH:
                raise SpecError(f"pipeline layout {shown!r} nests parentheses deeper than {MAX_LAYOUT_DEPTH}",
                                path=PATH)
            group: Tree = []
            stack[-1].append((group, 1))
            stack.append(group)
            continue
        if ch == ")":
            if len(stack) == 1:
                raise SpecError(f"pipeline layout {shown!r}: unmatched ')' at position {pos - 1}", path=PATH)
            stack.pop()
        elif ch in _ONE:
            stack[-1].append((ch, 1))
        else:
            raise SpecError(f"pipeline layout {shown!r}: unexpected {ch!r} at position {pos - 1} (expected E, t, "
                            "m, L, |, *N or parentheses)", path=PATH)
        if pos < len(s) and s[pos] == "*":
            start = pos = pos + 1
            while pos < len(s) and s[pos].isdigit():
                pos += 1
            digits = s[start:pos]
            if not digits:
                raise SpecError(f"pipeline layout {shown!r}: expected a count after '*' at position {start}",
                                path=PATH)
            if len(digits.lstrip("0")) > _MAX_COUNT_DIGITS or int(digits) > MAX_LAYOUT_ITEMS:
                raise SpecError(f"pipeline layout {shown!r}: repeat count {digits[:24]}"
                                f"{'...' if len(digits) > 24 else ''} is above the cap of {MAX_LAYOUT_ITEMS:,}",
                                path=PATH)
            item, _ = stack[-1][-1]  # the letter or the group just closed
            stack[-1][-1] = (item, int(digits))
    if len(stack) > 1:
        raise SpecError(f"pipeline layout {shown!r}: missing ')'", path=PATH)
    return root


def _counts(tree: Tree) -> LayoutCounts:
    """Counts of a tree (depth <= MAX_LAYOUT_DEPTH, so the recursion is shallow)."""
    out = LayoutCounts()
    for item, n in tree:
        out = out.then((_ONE[item] if isinstance(item, str) else _counts(item)).times(n))
    return out


def _expand(tree: Tree) -> list[str]:
    """The items of a tree, in order (only called once its counts are checked)."""
    out: list[str] = []
    for item, n in tree:
        out += ([item] if isinstance(item, str) else _expand(item)) * n
    return out


def layout_counts(text: str) -> LayoutCounts:
    """Chunk, layer and item counts of ``text`` from its grammar, without expanding it (SpecError for a
    syntax error or a cap, module docstring)."""
    return _counts(_parse(text))


def parse_pipeline_layout(text: str, pp: int, vpp: int, layers: int,
                          path: tuple[str, ...] = PATH) -> ParsedLayout:
    """Layers per stage of ``text`` for ``pp`` stages of ``vpp`` chunks and a ``layers``-layer model;
    SpecError (at ``path``) naming what does not match. The counts are checked before anything is
    expanded (module docstring)."""
    try:
        tree = _parse(text)
    except SpecError as e:
        raise SpecError(e.message, path=path) from None
    c = _counts(tree)
    shown = text if len(text) <= 60 else text[:57] + "..."
    if c.chunks != pp * vpp:
        raise SpecError(f"pipeline layout {shown!r} has {c.chunks:,} chunks; pp x vpp = {pp} x {vpp} needs "
                        f"{pp * vpp}", path=path)
    if c.layers != layers:
        raise SpecError(f"pipeline layout {shown!r} places {c.layers:,} layers; the model has {layers}", path=path)
    if c.emb != 1:
        raise SpecError(f"pipeline layout {shown!r}: the embedding 'E' must open the first chunk, once", path=path)
    if c.loss != 1:
        raise SpecError(f"pipeline layout {shown!r}: the loss 'L' must close the last chunk, once", path=path)
    if c.items > MAX_LAYOUT_ITEMS:
        raise SpecError(f"pipeline layout {shown!r} expands to {c.items:,} items, more than the cap of "
                        f"{MAX_LAYOUT_ITEMS:,}", path=path)
    tokens = _expand(tree)
    chunks: list[list[str]] = [[]]
    for tok in tokens:
        if tok == "|":
            chunks.append([])
        else:
            chunks[-1].append(tok)
    if not chunks[-1] and len(chunks) > 1:
        chunks.pop()  # a trailing '|'
    if chunks[0][:1] != ["E"]:
        raise SpecError(f"pipeline layout {shown!r}: the embedding 'E' must open the first chunk, once", path=path)
    if chunks[-1][-1:] != ["L"]:
        raise SpecError(f"pipeline layout {shown!r}: the loss 'L' must close the last chunk, once", path=path)
    stages = [0] * pp
    for j, chunk in enumerate(chunks):
        stages[j % pp] += sum(tok in "tm" for tok in chunk)
    return ParsedLayout(tuple(stages))


def pinned_layout_string(fixed: dict, model) -> ParsedLayout | None:
    """For a search whose fixed fields (ParallelismSpec names) hold ``pipeline_layout``: the parsed string
    (pp and vpp must be fixed with it), with ``fixed`` updated so that no other stage split is offered
    (the string replaces first/last stage layers and the embedding/loss slots). None without a string."""
    text = fixed.pop("pipeline_layout", None)
    if not text:
        return None
    if "pp" not in fixed:
        raise SpecError("a pipeline layout string needs pp (and vpp) given with it", path=PATH)
    fixed.setdefault("vpp", 1)
    parsed = parse_pipeline_layout(str(text), int(fixed["pp"]), int(fixed["vpp"]), model.layers)
    fixed.update(embedding_in_split=False, loss_in_split=False)
    return parsed


def balanced_layout(layers: int, pp: int, vpp: int) -> str | None:
    """The layout string Megatron-Bridge's recipes give a model whose layers do not split into ``pp x vpp``
    whole chunks (``set_deepseek_v3_pipeline_model_parallel_layout``): ``ceil(layers / chunks)`` layers per
    chunk, the embedding with the first, the rest in the last chunk with the loss; DeepSeek-V3's 61 layers
    give ``Et*4|(t*4|)*14tL`` for 16 chunks and ``Et*8|(t*8|)*6t*5L`` for 8, the recipe's own strings. When
    that would leave the last chunk empty, the layers are spread as evenly as possible instead (the first
    ``layers mod chunks`` chunks one more). None when the layers split evenly or cannot fill the chunks."""
    chunks = pp * vpp
    if chunks < 2 or layers % chunks == 0 or layers < chunks:
        return None
    per = -(-layers // chunks)
    rest = layers - per * (chunks - 1)
    if rest >= 1:
        sizes = [per] * (chunks - 1) + [rest]
    else:
        base, extra = divmod(layers, chunks)
        sizes = [base + 1] * extra + [base] * (chunks - extra)
    parts = [("t" if n == 1 else f"t*{n}") for n in sizes]
    return "E" + "|".join(parts) + "L"
