"""The one YAML loader: PyYAML's safe loader with limits that hold in bounded time.

PyYAML's ``safe_load`` constructs only plain data, but it still accepts two things a hostile (or careless)
file can use against a reader:

- **Alias bombs** ("billion laughs"): ``a: &a [x, x, x]``, ``b: &b [*a, *a, *a]`` ... The composed document
  is a small graph whose *expansion* grows 9x per line; the loader itself shares the repeated lists, but every
  consumer that walks the data (depth checks, pydantic, the models) pays for the expansion. Here the composed
  node graph is walked once, memoised by node identity, *before* anything is constructed: a document is refused
  when it uses more than :data:`MAX_ALIASES` alias references, when its aliases would add more than
  :data:`MAX_ALIAS_NODES` nodes, when an alias refers to the node that contains it (a cycle), or when the
  expanded document has more than :data:`MAX_NODES` nodes. Anchors and aliases themselves stay allowed (merge
  keys ``<<: *defaults`` are common in hand-written cluster files); only their expansion is budgeted.
- **Duplicate keys**: YAML says mapping keys are unique, PyYAML keeps the last silently. Here a repeated key
  is an error naming both lines (merge keys are exempt: overriding a merged key is what they are for).

Refusals take milliseconds: the walk visits each composed node once, whatever its expansion
(tests/fuzz/test_yaml_limits.py holds the seeded bombs and their CPU/memory bounds).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from clustertwin.errors import SpecError

MAX_ALIASES = 1_000
"""Most alias references (``*name``) one document may use."""
MAX_ALIAS_NODES = 100_000
"""Most nodes that alias expansion may add to a document (beyond the nodes written in the file)."""
MAX_NODES = 5_000_000
"""Most nodes (scalars, lists, mappings) of one expanded document; the largest shipped case file has ~60,000."""

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's C parser when PyYAML was built with it (7x faster on large case files), else the Python one."""
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def check_node_graph(root: Node, file: str | None = None) -> int:
    """Expanded node count of the composed document ``root``; SpecError past the alias/node budgets.

    Iterative post-order walk memoised by ``id(node)``: ``size(n) = 1 + sum(size(child))``, each distinct node
    visited once, so a 9^9-node bomb costs ~100 visits. A child already on the walk's path is a recursive alias."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    reached: set[int] = {id(root)}
    aliases = 0
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size = 1
            for c in _children(node):
                size += sizes[id(c)]
            sizes[key] = size
            if size > MAX_NODES:
                raise SpecError(f"YAML aliases expand the document to more than {MAX_NODES:,} nodes "
                                f"(line {_line(node)}; an alias bomb?)", file=file)
            continue
        if key in sizes:  # reached again through an alias, already sized
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            ck = id(child)
            if ck in on_path:
                raise SpecError(f"recursive alias at line {_line(child)}: a node that contains itself", file=file)
            if ck in reached:
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise SpecError(f"more than {MAX_ALIASES:,} YAML aliases (line {_line(child)}); "
                                    "write the values out or use fewer anchors", file=file)
            reached.add(ck)
            if ck not in sizes:
                stack.append((child, False))
    total = sizes[id(root)]
    literal = len(sizes)
    if total - literal > MAX_ALIAS_NODES:
        raise SpecError(f"YAML aliases expand the document by {total - literal:,} nodes, more than the "
                        f"{MAX_ALIAS_NODES:,} allowed (an alias bomb?)", file=file)
    return total


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


class LimitedSafeLoader(_BASE):  # type: ignore[misc,valid-type]
    """Safe loader that budgets alias expansion and refuses duplicate keys (see the module docstring).

    ``file`` names the document in errors; set it on the instance before loading (:func:`load_yaml` does)."""

    file: str | None = None
    may_alias: bool = True
    """False when the text has no ``&`` or no ``*``: no anchor, no alias, nothing to expand (skips the walk)."""

    def construct_document(self, node: Node) -> Any:
        if self.may_alias:
            check_node_graph(node, self.file)
        return super().construct_document(node)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> Any:
        if isinstance(node, MappingNode):
            keys = [(k.tag, k.value) for k, _ in node.value if isinstance(k, ScalarNode) and k.tag != _MERGE_TAG]
            if len(set(keys)) != len(keys):
                self._duplicate(node)
        return super().construct_mapping(node, deep=deep)

    def _duplicate(self, node: MappingNode) -> None:
        seen: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            k = (key_node.tag, key_node.value)
            if k in seen:
                raise SpecError(f"duplicate key '{key_node.value[:60]}' at line {_line(key_node)} "
                                f"(first at line {seen[k]})", file=self.file)
            seen[k] = _line(key_node)


def load_yaml(text: str, file: str | None = None) -> Any:
    """The single document of ``text`` as plain Python data, through :class:`LimitedSafeLoader`.

    A second document (``---``) is PyYAML's ComposerError, reported by the caller as invalid YAML."""
    loader = LimitedSafeLoader(text)
    loader.file = file
    loader.may_alias = "&" in text and "*" in text
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
