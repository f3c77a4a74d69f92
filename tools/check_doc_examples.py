"""Re-run the shell examples of README.md and docs/*.md and report the ones whose output changed, so the
docs stay true after a model change (``make docs-check``; ``--update`` rewrites the changed outputs).

An example is a ``$ `` line in a fenced block (``\\`` continues it; a ``<<EOF`` here-document takes the
lines up to its terminator, so an example can create the file the next one reads; a quoted argument may
span lines), its expected output the
lines up to the next ``$`` line or the end of the block. Examples with ``...`` in the command are
abbreviations and are skipped. The examples of one Markdown file run in order, as written, in one scratch
folder that mirrors the repository root (every top-level entry linked), so ``tests/fixtures/...`` and
``examples/...`` paths resolve, a file one example writes (``-o cal.yaml``) is there for the next, and
nothing is written into the checkout's root. ``$?`` in a command is the exit status of the example before
it (``$ echo $?``). ``.venv/bin`` (``--bin``) comes first on PATH.

What is compared is the numbers the output shows (table layout varies with the terminal width); lines that
carry measured times (``ms``, ``CPU``, ``wall``, ``in 6.1 s``) are not compared. An example whose shown output has no
``error:`` line must also exit 0, and one that shows an ``error:`` line must fail.

A fenced block can be marked by an HTML comment on the line before its opening fence (invisible when the
Markdown is rendered); several markers are separated by ``;``:

- ``<!-- docs-check: host -->``: the output depends on the machine that runs it (a live node check, a
  benchmark, timings, a calibration measured on the host): shown, never run.
- ``<!-- docs-check: needs PROG [PROG ...] -->``: runs only where every PROG is on PATH (``sbatch`` for a
  Slurm example, ``promtool``, ``jq``); skipped, and counted as such, elsewhere.
- ``<!-- docs-check: exit N -->``: the block's commands are documented to exit with status N.
- ``<!-- docs-check: run-only -->``: the command must succeed, but its output (random, dated) is not
  compared.

Exit status 1 when any example differs or fails, 0 otherwise. ``-j N`` checks N files at once.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = re.compile(r"\b(ms|CPU|wall|elapsed|took|seconds?)\b|\d{4}-\d\d-\d\dT|\bin \d[\d.,]* s\b|/s; wrote\b")
MARKER = re.compile(r"^\s*<!--\s*docs-check:\s*(.*?)\s*-->\s*$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
ELISION = ("…", "...")


@dataclass
class Example:
    path: Path
    line: int
    command: str
    expected: list[str]
    end: int = 0
    """index (0-based) one past the last line of the expected output"""
    marks: dict[str, str] = field(default_factory=dict)
    """the block's ``docs-check`` markers: name -> argument ('' for none)"""

    @property
    def columns(self) -> int:
        """Terminal width the output was written for: its widest line (at least 80)."""
        return max([80, *(len(x) for x in self.expected)])

    @property
    def shows_error(self) -> bool:
        return any(x.startswith("error:") for x in self.expected)

    def skip_reason(self) -> str | None:
        """Why this example is not run here (a ``host`` mark, a missing program), or None."""
        if "host" in self.marks:
            return "host-dependent"
        missing = [p for p in self.marks.get("needs", "").split() if shutil.which(p) is None]
        return f"needs {' '.join(missing)}" if missing else None


def parse_marks(text: str) -> dict[str, str]:
    """``host; needs sbatch srun; exit 1`` -> {'host': '', 'needs': 'sbatch srun', 'exit': '1'}."""
    marks: dict[str, str] = {}
    for part in text.split(";"):
        name, _, arg = part.strip().partition(" ")
        if name:
            marks[name] = arg.strip()
    return marks


def _open_quote(cmd: str) -> bool:
    """Whether ``cmd`` ends inside a quoted string (the shell would read on)."""
    try:
        shlex.split(cmd, comments=True)
    except ValueError:
        return True
    return False


def _command(lines: list[str], i: int) -> tuple[str, int]:
    """The command starting at line i (``\\`` continuations, then a here-document); the index of its last
    line."""
    cmd = lines[i][2:]
    while i + 1 < len(lines) and not lines[i + 1].startswith("```"):
        if cmd.endswith("\\"):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        elif _open_quote(cmd):  # a quoted argument (a jq program) spans lines, as the shell reads it
            i += 1
            cmd = cmd + "\n" + lines[i]
        else:
            break
    m = HEREDOC.search(cmd)
    if m:
        body = []
        while i + 1 < len(lines) and lines[i + 1].strip() != m.group(2) and not lines[i + 1].startswith("```"):
            i += 1
            body.append(lines[i])
        if i + 1 < len(lines) and lines[i + 1].strip() == m.group(2):
            i += 1
        cmd = "\n".join([cmd, *body, m.group(2)])
    return cmd, i


def examples(path: Path) -> list[Example]:
    out: list[Example] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    in_block = False
    marks: dict[str, str] = {}
    cur: Example | None = None
    i = 0
    while i < len(lines):
        s = lines[i]
        if s.startswith("```"):
            in_block = not in_block
            cur = None
            if in_block:
                j = i - 1
                while j >= 0 and not lines[j].strip():
                    j -= 1
                m = MARKER.match(lines[j]) if j >= 0 else None
                marks = parse_marks(m.group(1)) if m else {}
        elif in_block and s.startswith("$ "):
            start = i
            cmd, i = _command(lines, i)
            cur = None
            if "..." not in cmd and "…" not in cmd:
                cur = Example(path, start + 1, cmd, [], marks=marks)
                out.append(cur)
        elif in_block and cur is not None:
            cur.expected.append(s)
        if cur is not None:
            cur.end = i + 1 if not s.startswith("```") else i
        i += 1
    return out


NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?")


def numbers(lines: list[str]) -> Counter[str]:
    """The numbers an output shows (table wrapping and column widths vary with the terminal; numbers do
    not), from lines that carry no measured time."""
    return Counter(n for x in lines if not VOLATILE.search(x) for n in NUMBER.findall(x))


def scratch_root() -> Path:
    """A fresh folder whose top-level entries link to the repository's (hidden ones left out)."""
    tmp = Path(tempfile.mkdtemp(prefix="docs-check-"))
    for entry in ROOT.iterdir():
        if not entry.name.startswith("."):
            (tmp / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return tmp


def run(ex: Example, bin_dir: str, timeout: float, cwd: Path, prev_code: int = 0) -> tuple[int, list[str]]:
    """Run one example in ``cwd`` with bash (``$?`` = ``prev_code``); its exit status and output lines."""
    env = {**os.environ, "COLUMNS": str(ex.columns), "NO_COLOR": "1", "TERM": "dumb", "PYTHONUNBUFFERED": "1",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("FORCE_COLOR", None)
    try:
        r = subprocess.run(["bash", "-c", f"(exit {prev_code})\n{ex.command}"], cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env)
        code, out = r.returncode, r.stdout.rstrip("\n").splitlines()  # (stderr where a terminal shows it)
    except subprocess.TimeoutExpired:
        code, out = 124, ["<timeout>"]
    return code, [x.rstrip() for x in out]


def expected_code_ok(ex: Example, code: int) -> bool:
    if "exit" in ex.marks:
        return str(code) == ex.marks["exit"]
    return code != 0 if ex.shows_error else code == 0


def _key(line: str) -> str:
    """What identifies a line across runs: a border line by its first character, a table row by its first
    cell, other text by what precedes its first number."""
    s = line.strip()
    if not s:
        return ""
    if s[0] in "┏┡└┗╭╰+":
        return s[0]
    if s[0] in "│┃":
        return s[0] + s[1:].split(s[0], 1)[0].strip()
    return NUMBER.split(s, 1)[0].strip()


def merge_elided(old: list[str], new: list[str]) -> list[str]:
    """An abbreviated output (with ``…`` lines) keeps its selection of lines: each kept line is replaced by
    the next new line with the same key, in order; lines with no counterpart are dropped."""
    out: list[str] = []
    j = 0
    for line in old:
        k = _key(line)
        if not k or line.strip() in ELISION:
            out.append(line)
            continue
        hit = next((i for i in range(j, len(new)) if _key(new[i]) == k), None)
        if hit is not None:  # a line the command no longer prints is dropped (it is no longer true)
            out.append(new[hit])
            j = hit + 1
    return out


def replaceable(ex: Example, code: int, got: list[str]) -> bool:
    """Rewrite only an example that still runs here: its exit status is the documented one, and its output
    does not say a file is missing."""
    if not got or any("file not found" in g or "No such file" in g for g in got):
        return False
    return expected_code_ok(ex, code) and (not ex.shows_error or any(g.startswith("error:") for g in got))


@dataclass
class FileResult:
    total: int = 0
    bad: int = 0
    skipped: int = 0
    updated: int = 0
    report: list[str] = field(default_factory=list)


def check_file(f: Path, bin_dir: str, timeout: float, update: bool) -> FileResult:
    """Run every example of one Markdown file in order in one scratch folder; rewrite changed outputs when
    ``update``."""
    res = FileResult()
    text = f.read_text(encoding="utf-8")
    exs = examples(f)
    rel = f.relative_to(ROOT) if f.is_relative_to(ROOT) else f
    edits: list[tuple[int, int, list[str]]] = []
    cwd = scratch_root()
    prev = 0
    try:
        for ex in exs:
            res.total += 1
            why = ex.skip_reason()
            if why:
                res.skipped += 1
                res.report.append(f"{rel}:{ex.line}: skipped ({why}): {ex.command.splitlines()[0]}")
                continue
            code, got = run(ex, bin_dir, timeout, cwd, prev)
            prev = code
            missing = Counter() if "run-only" in ex.marks else numbers(ex.expected) - numbers(got)
            code_ok = expected_code_ok(ex, code)
            if not missing and code_ok:
                continue
            res.bad += 1
            extra = numbers(got) - numbers(ex.expected)
            res.report.append(f"{rel}:{ex.line}: {ex.command.splitlines()[0]}")
            if not code_ok:
                res.report.append(f"    exit status {code}: {' | '.join(got[-3:])[:300]}")
            res.report.append(f"    docs only: {' '.join(list(missing.elements())[:16])}")
            res.report.append(f"    now only : {' '.join(list(extra.elements())[:16])}")
            if update and replaceable(ex, code, got):
                elided = any(x.strip() in ELISION for x in ex.expected)
                edits.append((ex.end - len(ex.expected), ex.end, merge_elided(ex.expected, got) if elided else got))
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    if edits and f.read_text(encoding="utf-8") != text:
        res.report.append(f"{rel}: changed while it was checked; not rewritten (run --update again)")
    elif edits:
        lines = text.splitlines()
        for start, end, got in reversed(edits):
            lines[start:end] = got
            res.updated += 1
        f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/*.md)")
    ap.add_argument("--bin", default=str(ROOT / ".venv" / "bin"), help="folder holding the clustertwin command")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one example may run")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="Markdown files checked at once")
    ap.add_argument("--update", action="store_true", help="write the new output into the docs where it changed")
    ap.add_argument("--list", action="store_true", help="list the examples (and their markers) without running")
    args = ap.parse_args(argv)
    files = [f.resolve() for f in args.files] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        print(f"check_doc_examples: no such Markdown file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.list:
        for f in files:
            for ex in examples(f):
                marks = "; ".join(f"{k} {v}".strip() for k, v in ex.marks.items())
                print(f"{f.relative_to(ROOT)}:{ex.line}: {ex.command.splitlines()[0]}" + (f"  [{marks}]" if marks else ""))
        return 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda f: check_file(f, args.bin, args.timeout, args.update), files))
    for r in results:
        for line in r.report:
            print(line)
    total, bad = sum(r.total for r in results), sum(r.bad for r in results)
    skipped, updated = sum(r.skipped for r in results), sum(r.updated for r in results)
    print(f"{total - bad - skipped} of {total} examples match, {bad} differ, {skipped} skipped"
          + (f"; {updated} rewritten" if args.update else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
