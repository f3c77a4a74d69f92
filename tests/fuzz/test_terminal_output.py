"""The terminal-output rule (cli/terminal.py): every command that prints a user-controlled name, log line or file
name shows it as written — no raw control byte (ESC/CSI/OSC, C1 ``\\x9b``, BEL) reaches stdout or stderr and no
Rich markup in it is interpreted (``[b]``, ``[/x]``, ``[link=…]`` print literally; ``[/x]`` once crashed plan)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clustertwin.cli import common
from clustertwin.cli.terminal import SafeConsole, styled
from clustertwin.safety import TERMINAL_UNSAFE, terminal_safe
from tests.fuzz.harness import run, write_yaml

#: a name with a screen clear, an OSC-8 hyperlink, a C1 CSI, BEL and three kinds of markup
EVIL = "Q\x1b[2J\x1b]8;;http://x\x07L\x1b]8;;\x07\x9b31m[b]M[/b][/x][link=http://x]K"
VISIBLE = terminal_safe(EVIL)
RAW = re.compile("[" + re.escape(TERMINAL_UNSAFE) + "]")


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide consoles, so a shown name is not folded across table lines and can be found whole."""
    monkeypatch.setattr(common.console, "width", 400)
    monkeypatch.setattr(common.err_console, "width", 400)


def _assert_shown_literally(out: str, args: tuple[str, ...], *, must_show: bool = True) -> None:
    raw = RAW.findall(out)
    assert not raw, f"raw control characters {sorted(set(raw))!r} in the output of {args}"
    flat = re.sub(r"\s*\n\s*", "", out)  # a long title folds across lines
    if must_show or "Q\\x1b" in out:
        assert VISIBLE in flat, f"{args}: the name is not shown as written: {out[:600]!r}"


def _evil_cluster(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "c.yaml", {"preset": "ref-1k-h100", "name": EVIL})


def _evil_model(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "m.yaml", {"preset": "llama3-8b", "name": EVIL})


TRAIN = ("--gpus", "64", "-b", "512", "--tp", "8", "--pp", "1")
COMMANDS: list[tuple[str, ...]] = [
    ("plan", "{c}"),
    ("plan", "{c}", "--compare", "ref-1k-h100"),
    ("train", "estimate", "-c", "{c}", "-m", "{m}", *TRAIN),
    ("explain", "-c", "{c}", "-m", "{m}", "--gpus", "64", "-b", "512", "--tp", "8"),
    ("hpc", "estimate", "hpl", "-c", "{c}", "--gpus", "64"),
]
#: commands that print the spec's id or nothing of its name: still no raw control byte anywhere
QUIET: list[tuple[str, ...]] = [
    ("train", "search", "-c", "{c}", "-m", "{m}", "--gpus", "64", "-b", "512", "--top", "2"),
    ("train", "scale", "-c", "{c}", "-m", "{m}", "-b", "512", "--start-gpus", "64", "--gpus", "128"),
    ("reliability", "-c", "{c}", "--gpus", "64", "--days", "2", "--trials", "20"),
]


@pytest.mark.parametrize("args", COMMANDS + QUIET, ids=[" ".join(a[:3]) for a in COMMANDS + QUIET])
def test_names_in_specs(tmp_path: Path, args: tuple[str, ...]) -> None:
    c, m = _evil_cluster(tmp_path), _evil_model(tmp_path)
    argv = tuple(a.format(c=c, m=m) for a in args)
    r = run("terminal", *argv)
    assert r.code == 0, r.stderr
    _assert_shown_literally(r.stdout + r.stderr, argv, must_show=args in COMMANDS)


def test_log_lines_and_file_names(tmp_path: Path) -> None:
    """The Xid line that crashed diagnose (Rich read ``[/usr/bin/python3]`` as a closing tag), in a file whose
    name carries markup, and ESC/C1 bytes in a log line: all shown literally."""
    log = tmp_path / "[red]x[link=y].log"
    log.write_bytes(
        b"Dec  1 10:00:00 node1 kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=1, name=python [/usr/bin/python3], "
        b"GPU has fallen off the bus.\n"
        b"Dec  1 10:00:01 node1 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=2, name=\x1b[2J\xc2\x9b31m[red] "
        b"[link=http://x]python, An uncorrectable double bit error.\n")
    r = run("terminal", "diagnose", str(log))
    assert r.code == 0, r.stderr
    out = r.stdout + r.stderr
    _assert_shown_literally(out, ("diagnose",), must_show=False)
    assert "[/usr/bin/python3]" in out and "XID_79" in out
    assert "[link=http://x]" in out and "\\x1b[2J" in out and "[red]x[link=y].log" in out


def test_spec_named_closing_tag(tmp_path: Path) -> None:
    """A spec named ``[/x]`` (exit 1 with a MarkupError in plan, train, hpc and explain before)."""
    c = write_yaml(tmp_path / "c.yaml", {"preset": "ref-1k-h100", "name": "[/x]"})
    for argv in (("plan", str(c)), ("train", "estimate", "-c", str(c), "-m", "llama3-8b", *TRAIN),
                 ("hpc", "estimate", "hpl", "-c", str(c)),
                 ("explain", "-c", str(c), "-m", "llama3-8b", "--gpus", "64", "-b", "512")):
        r = run("terminal", *argv)
        assert r.code == 0 and "[/x]" in r.stdout, (argv, r.stderr)


def test_usage_errors_escape_values() -> None:
    r = run("terminal", "train", "estimate", "--precision", "\x1b[2Jfp9")
    assert r.code == 2
    assert "\x1b" not in r.stderr


def test_safe_console_net_and_styles() -> None:
    """The net in SafeConsole.render catches a Text built without the helpers; styled() keeps its spans."""
    from io import StringIO

    from rich.text import Text

    buf = StringIO()
    con = SafeConsole(file=buf, force_terminal=True, width=80)
    con.print(Text("a\x1b[2Jb\x9bc"))
    con.print(styled(("warn", "yellow"), " [red]x\x07"))
    out = buf.getvalue()
    assert "a\\x1b[2Jb\\x9bc" in out and " [red]x\\x07" in out
    # only Rich's own SGR codes remain as escape sequences
    assert re.sub(r"\x1b\[[0-9;]*m", "", out).count("\x1b") == 0
    assert terminal_safe(terminal_safe(EVIL)) == terminal_safe(EVIL)
