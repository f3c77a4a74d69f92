"""Running a command for the API: its options validated, a pasted model read from a private temporary file, and
for the downloads (:data:`clustertwin.web.commands.DOWNLOADS`) the text the command itself writes.

A download is the CLI's output byte for byte: ``deploy slurm``, ``deploy k8s`` and ``report`` run as the CLI
runs them, with ``--output`` set to a file in a private temporary directory that is read back and removed; the
request never names a file (``--output``, ``--trace`` are not options of the API). What the command prints on
the terminal (its ``warning:`` lines, ``wrote FILE``) is captured, never shown: the warnings travel in the
``x-clustertwin-warnings`` header, the temporary name goes nowhere.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from clustertwin.errors import ClusterTwinError, SpecError
from clustertwin.safety import one_line
from clustertwin.web.commands import DOWNLOADS, full_arguments
from clustertwin.web.params import MAX_YAML_BYTES

T = TypeVar("T")
MAX_WARNINGS_HEADER = 2000
"""Longest ``x-clustertwin-warnings`` header value (characters)."""
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_TERMINAL = threading.Lock()
"""Held while a download's terminal output is captured (the capture swaps ``sys.stdout``/``sys.stderr``)."""


@dataclass(frozen=True)
class Download:
    """How a download is served: its media type and the file name it is saved under."""

    media_type: str
    suffix: str
    stem: Callable[[dict[str, Any]], str]
    """Arguments -> the file name without its suffix (made safe by :func:`safe_filename`)."""


def _report_stem(a: dict[str, Any]) -> str:
    return f"report-{a['cluster']}-{a['model']}"


FORMATS: dict[str, Download] = {
    "download/sbatch": Download("text/x-shellscript", ".sbatch", lambda a: str(a["job_name"])),
    "download/k8s": Download("application/yaml", ".yaml", lambda a: str(a["job_name"])),
    "download/report": Download("text/html", ".html", _report_stem),
}
"""Media type and file name of every download of :data:`DOWNLOADS`."""


def safe_filename(stem: str, suffix: str) -> str:
    """``stem`` + ``suffix`` with every run of characters outside ``[A-Za-z0-9._-]`` replaced by ``_``, no
    leading dot, at most 80 characters before the suffix (``clustertwin`` when nothing is left)."""
    name = _UNSAFE_NAME.sub("_", stem).lstrip("._")[:80]
    return (name or "clustertwin") + suffix


def run_with_options(path: str, options: BaseModel, run: Callable[[dict[str, Any]], T]) -> T:
    """``run`` of the full arguments of the command at ``path`` for the validated ``options`` (a pasted model
    is read through the CLI's own file reader from a private temporary file; its name never reaches the reply)."""
    given = options.model_dump(exclude_unset=False)
    text = given.pop("model_yaml", None)
    args = full_arguments(path, given)
    if text is None:
        return run(args)
    if len(text.encode("utf-8")) > MAX_YAML_BYTES:
        raise SpecError(f"model_yaml: over {MAX_YAML_BYTES:,} bytes")
    with tempfile.TemporaryDirectory(prefix="clustertwin-web-") as tmp:
        file = os.path.join(tmp, "model.yaml")
        Path(file).write_text(text, encoding="utf-8")
        args["model"] = file
        try:
            return run(args)
        except ClusterTwinError as e:
            raise SpecError(str(e).replace(file, "model_yaml")) from None


@dataclass(frozen=True)
class DownloadResult:
    """A download's text, the name to save it under, and the CLI's warnings about it."""

    text: str
    filename: str
    warnings: tuple[str, ...]


def _written(path: str, args: dict[str, Any], pasted: bool) -> DownloadResult:
    fmt = FORMATS[path]
    stem = fmt.stem({**args, "model": "model" if pasted else args["model"]})
    with tempfile.TemporaryDirectory(prefix="clustertwin-web-") as tmp:
        out, err = io.StringIO(), io.StringIO()
        with _TERMINAL, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            text = DOWNLOADS[path].run({**args, "output": Path(tmp) / f"download{fmt.suffix}"})
    warnings = tuple(one_line(line.removeprefix("warning: ")) for line in err.getvalue().splitlines()
                     if line.startswith("warning: "))
    return DownloadResult(text, safe_filename(stem, fmt.suffix), warnings)


def download(path: str, options: BaseModel) -> DownloadResult:
    """The file the command at ``path`` (one of :data:`DOWNLOADS`) writes for ``options``, as the CLI writes it."""
    pasted = getattr(options, "model_yaml", None) is not None
    return run_with_options(path, options, lambda args: _written(path, args, pasted))


def warnings_header(warnings: tuple[str, ...]) -> str:
    """The warnings as one ASCII header value (``; ``-separated, non-ASCII escaped, at most
    :data:`MAX_WARNINGS_HEADER` characters)."""
    text = "; ".join(warnings).encode("ascii", "backslashreplace").decode("ascii")
    return text[:MAX_WARNINGS_HEADER]
