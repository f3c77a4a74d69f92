"""The terminal-output rule: everything the CLI prints through Rich is shown as text, never acted on.

- No markup or emoji codes are read from strings (:class:`SafeConsole` is built with ``markup=False,
  emoji=False``): a name such as ``[/x]`` or ``[link=http://…]`` prints as written; styles come only from
  :class:`rich.text.Text` spans the CLI builds itself (:func:`styled`).
- Control characters become visible escapes (:func:`clustertwin.safety.terminal_safe`) twice over: in every
  string Rich turns into text (``render_str``: titles, headers, printed lines, before layout so tables stay
  aligned) and, as a net, in every text segment that reaches the terminal (``render``), whatever built it.
  Rich's own cursor and style codes are control segments and pass untouched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from clustertwin.safety import TERMINAL_UNSAFE_RE, terminal_safe


class SafeConsole(Console):
    """A rich Console that prints user strings literally and escapes terminal controls (module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("emoji", False)
        super().__init__(**kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(terminal_safe(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control is None and TERMINAL_UNSAFE_RE.search(seg.text):
                yield Segment(terminal_safe(seg.text), seg.style)
            else:
                yield seg


def styled(*parts: str | tuple[str, str]) -> Text:
    """One line from plain parts and ``(text, style)`` pairs, each part's text made terminal-safe:
    ``styled(("warning", "yellow"), f" ({name}): {message}")``."""
    out = Text()
    for part in parts:
        if isinstance(part, tuple):
            out.append(terminal_safe(part[0]), style=part[1])
        else:
            out.append(terminal_safe(part))
    return out


def safe_text(value: str, style: str = "") -> Text:
    """A table cell or line that is shown as written (terminal controls escaped)."""
    return Text(terminal_safe(value), style=style)
