"""Output safety: one place that makes user strings safe for every text format clustertwin generates.

Rules (each generated format uses the helper for its context):

- ``#`` comments and one-line headers (shell, YAML, Prometheus ``# HELP``): :func:`one_line` replaces every
  character at which *some* parser breaks a line, and every control character, with a space. YAML 1.1
  breaks lines at LF, CR, NEL (U+0085), LS (U+2028) and PS (U+2029); Python's ``str.splitlines`` also at
  VT, FF and FS/GS/RS (U+001C-U+001E); terminals act on the remaining C0/C1 controls (ESC, CSI U+009B).
  Bidirectional overrides (U+202A-U+202E, U+2066-U+2069) and the BOM are removed too, so a comment reads
  as it will run ("Trojan Source", CVE-2021-42574).
- Validated words (Slurm partitions, Kubernetes names, paths; ``deploy.job``) match the whole string with
  ``re.fullmatch`` (a ``$``-anchored ``re.match`` also accepts a trailing newline).
- Shell words: ``shlex.quote`` (``deploy.slurm``: one word whatever the content).
- YAML scalars: ``yaml.safe_dump`` (``deploy.k8s``; PyYAML quotes and escapes every line break, so a scalar
  stays one scalar; round trip asserted in tests/fuzz/test_output_safety.py).
- HTML: jinja2 autoescape, every printed string through :func:`one_line` (``report.html``); JSON inside
  ``<script>``: :func:`script_json`.
- Prometheus label values (``ops.exporter``): :func:`one_line`, then prometheus_client's escapes of backslash,
  double quote and line feed.
"""

from __future__ import annotations

import re

from markupsafe import Markup

#: Every character some consumer treats as a line break (YAML 1.1 and str.splitlines together).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
#: Characters :func:`one_line` removes: C0 controls, DEL, C1 controls (NEL among them), the Unicode line and
#: paragraph separators, bidirectional embeddings/overrides/isolates and the zero-width no-break space (BOM).
UNSAFE_IN_LINE = "".join(map(chr, range(0x20))) + "".join(map(chr, range(0x7F, 0xA0))) + (
    "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff")
_UNSAFE_RE = re.compile("[" + re.escape(UNSAFE_IN_LINE) + "]+")

_JSON_IN_SCRIPT = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def one_line(text: object) -> str:
    """``text`` as one line for a ``#`` comment or a header: every run of unsafe characters
    (:data:`UNSAFE_IN_LINE`) becomes one space; trailing blanks are dropped."""
    return _UNSAFE_RE.sub(" ", str(text)).rstrip()


comment_safe = one_line
"""Alias used by the renderers (a comment is the strictest one-line context)."""


def script_json(json_text: str) -> Markup:
    """JSON text safe inside a ``<script>`` element: ``<``, ``>``, ``&``, U+2028 and U+2029 written as
    ``\\u003c``-style escapes, so the same value parses back and no ``</script>`` can close the element."""
    for ch, rep in _JSON_IN_SCRIPT.items():
        json_text = json_text.replace(ch, rep)
    return Markup(json_text)


#: Characters a terminal acts on, shown by :func:`terminal_safe` as visible escapes: C0 controls except line
#: feed and tab (ESC among them: CSI/OSC sequences, OSC-8 hyperlinks), DEL, the C1 controls (U+009B is a
#: one-byte CSI on some terminals), the line/paragraph separators, bidirectional controls and the BOM.
TERMINAL_UNSAFE = "".join(chr(c) for c in range(0x20) if chr(c) not in "\n\t") + "".join(
    map(chr, range(0x7F, 0xA0))) + "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff"
TERMINAL_UNSAFE_RE = re.compile("[" + re.escape(TERMINAL_UNSAFE) + "]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: object) -> str:
    """``text`` with every terminal control character (:data:`TERMINAL_UNSAFE`) written as a visible escape
    (``ESC`` -> ``\\x1b``, ``U+009B`` -> ``\\x9b``), so a name or a log line is shown, never executed by the
    terminal. Idempotent (the escapes are printable). Rich markup is a separate matter: the CLI's console
    never interprets markup in strings (``cli/terminal.py``)."""
    s = str(text)
    return TERMINAL_UNSAFE_RE.sub(_visible, s) if TERMINAL_UNSAFE_RE.search(s) else s
