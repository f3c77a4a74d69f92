"""Re-run the ``$ clustertwin ...`` examples of README.md and docs/*.md and report the ones whose output
changed, so the docs stay true after a model change (``make docs-check``).

An example is a ``$ clustertwin`` line in a fenced block (``\\`` continues it), its expected output the
lines up to the next ``$`` line or the end of the block. Examples with ``...`` in the command are
abbreviations and are skipped. What is compared is the numbers the output shows (table layout varies with
the terminal width); lines that carry measured times (``ms``, ``CPU``, ``wall``) are not compared. Exit status 1 when any example
differs (or fails), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = re.compile(r"\b(ms|CPU|wall|elapsed|took|seconds?)\b|\d{4}-\d\d-\d\dT")


@dataclass
class Example:
    path: Path
    line: int
    command: str
    expected: list[str]
    end: int = 0
    """index (0-based) one past the last line of the expected output"""

    @property
    def columns(self) -> int:
        """Terminal width the output was written for: its widest line (at least 80)."""
        return max([80, *(len(x) for x in self.expected)])


def examples(path: Path) -> list[Example]:
    out: list[Example] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    in_block = False
    cur: Example | None = None
    i = 0
    while i < len(lines):
        s = lines[i]
        if s.startswith("```"):
            in_block = not in_block
            cur = None
        elif in_block and s.startswith("$ "):
            start = i
            cmd = s[2:]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            cur = None
            if cmd.startswith("clustertwin ") and "..." not in cmd:
                cur = Example(path, start + 1, cmd, [])
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


def run(ex: Example, bin_dir: str, timeout: float) -> tuple[int, list[str]]:
    """Run one example in the repository root; files it writes there (reports, calibrations) are removed."""
    cmd = f"{bin_dir}/{ex.command}" if Path(bin_dir).is_dir() else ex.command
    before = set(os.listdir(ROOT))
    try:
        r = subprocess.run(cmd, shell=True, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, env={**os.environ, "COLUMNS": str(ex.columns), "NO_COLOR": "1",
                                                 "TERM": "dumb", "PYTHONUNBUFFERED": "1"})
        code, out = r.returncode, r.stdout.rstrip("\n").splitlines()  # (stderr where a terminal shows it)
    except subprocess.TimeoutExpired:
        code, out = 124, ["<timeout>"]
    for name in set(os.listdir(ROOT)) - before:
        path = ROOT / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return code, [x.rstrip() for x in out]


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
        if not k or line.strip() in ("…", "..."):
            out.append(line)
            continue
        hit = next((i for i in range(j, len(new)) if _key(new[i]) == k), None)
        if hit is not None:  # a line the command no longer prints is dropped (it is no longer true)
            out.append(new[hit])
            j = hit + 1
    return out


def replaceable(ex: Example, code: int, got: list[str]) -> bool:
    """Rewrite only an example that still runs here: it succeeded (or it documents an error and still
    fails with one), and its output does not say a file is missing."""
    if not got or any("file not found" in g or "No such file" in g for g in got):
        return False
    documents_error = bool(ex.expected) and ex.expected[0].startswith("error:")
    return code == 0 or (documents_error and got[0].startswith("error:"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/*.md)")
    ap.add_argument("--bin", default=str(ROOT / ".venv" / "bin"), help="folder holding the clustertwin command")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--update", action="store_true", help="write the new output into the docs where it changed")
    args = ap.parse_args(argv)
    files = args.files or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = total = updated = 0
    for f in files:
        exs = examples(f)
        lines = f.read_text(encoding="utf-8").splitlines()
        edits: list[tuple[int, int, list[str]]] = []
        for ex in exs:
            total += 1
            code, got = run(ex, args.bin, args.timeout)
            missing = numbers(ex.expected) - numbers(got)
            if not missing:
                continue
            bad += 1
            rel = ex.path.relative_to(ROOT) if ex.path.is_relative_to(ROOT) else ex.path
            extra = numbers(got) - numbers(ex.expected)
            print(f"{rel}:{ex.line}: {ex.command}")
            print(f"    docs only: {' '.join(list(missing.elements())[:16])}")
            print(f"    now only : {' '.join(list(extra.elements())[:16])}")
            if args.update and replaceable(ex, code, got):
                elided = any(x.strip() in ("…", "...") for x in ex.expected)
                edits.append((ex.end - len(ex.expected), ex.end, merge_elided(ex.expected, got) if elided else got))
        for start, end, got in reversed(edits):
            lines[start:end] = got
            updated += 1
        if edits:
            f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{total - bad} of {total} examples match" + (f"; {updated} rewritten" if args.update else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
