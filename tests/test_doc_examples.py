"""The docs-example checker (tools/check_doc_examples.py): it finds examples as a reader pastes them
(continuations, here-documents, quoted arguments over lines), runs a file's examples in order in a scratch
folder, honours the block markers and keeps abbreviated outputs."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("check_doc_examples", ROOT / "tools" / "check_doc_examples.py")
cde = importlib.util.module_from_spec(spec)
sys.modules["check_doc_examples"] = cde
spec.loader.exec_module(cde)

DOC = """intro
```
$ clustertwin comm all_reduce \\
    -b 8 -e 16
#  size  time
      8   12.5
$ echo not ours
hello
```
```
$ clustertwin train estimate ... (abbreviated)
x
```
"""


def test_examples_join_continuations_and_skip_abbreviated_commands(tmp_path):
    f = tmp_path / "d.md"
    f.write_text(DOC)
    ex, echo = cde.examples(f)
    assert ex.command == "clustertwin comm all_reduce  -b 8 -e 16"
    assert ex.expected == ["#  size  time", "      8   12.5"]
    assert f.read_text().splitlines()[ex.end - len(ex.expected):ex.end] == ex.expected
    assert (echo.command, echo.expected) == ("echo not ours", ["hello"])


PASTED = """Write the file, then read it; a quoted program spans lines; the exit status carries over:
```
$ cat > spec.yaml <<'EOF'
nodes: 4
gpus: 32
EOF
$ grep -c : spec.yaml
2
$ awk -F': ' '{ s += $2 }
    END { print s }' spec.yaml
36
$ sh -c 'echo error: bad; exit 3'
error: bad
$ echo $?
3
```
<!-- docs-check: host -->
```
$ cat /proc/cpuinfo
model name : any
```
<!-- docs-check: needs no-such-program-here; exit 1 -->
```
$ no-such-program-here
```
<!-- docs-check: exit 1 -->
```
$ grep -c nodes missing-file.yaml
2
```
"""


def test_a_file_s_examples_run_in_order_in_a_scratch_folder(tmp_path):
    f = tmp_path / "pasted.md"
    f.write_text(PASTED)
    exs = cde.examples(f)
    assert [e.command.splitlines()[0] for e in exs] == [
        "cat > spec.yaml <<'EOF'", "grep -c : spec.yaml", "awk -F': ' '{ s += $2 }", "sh -c 'echo error: bad; exit 3'",
        "echo $?", "cat /proc/cpuinfo", "no-such-program-here", "grep -c nodes missing-file.yaml"]
    assert exs[0].command.splitlines()[1:] == ["nodes: 4", "gpus: 32", "EOF"] and exs[0].expected == []
    assert exs[5].marks == {"host": ""} and exs[6].marks == {"needs": "no-such-program-here", "exit": "1"}
    before = set(cde.ROOT.iterdir())
    res = cde.check_file(f, str(tmp_path / "no-bin"), 30, update=False)
    assert set(cde.ROOT.iterdir()) == before  # nothing written into the checkout
    assert not (tmp_path / "spec.yaml").exists()
    # the last example shows a count but the file is missing: its output differs (and exit 2 is not 1)
    assert (res.total, res.skipped, res.bad) == (8, 2, 1), res.report
    assert "missing-file.yaml" in res.report[-4] and "exit status 2" in res.report[-3]
    assert "skipped (host-dependent)" in res.report[0] and "skipped (needs no-such-program-here)" in res.report[1]


def test_update_rewrites_a_changed_output_in_place(tmp_path):
    f = tmp_path / "u.md"
    f.write_text("```\n$ echo 'total 41 of 7'\ntotal 40 of 7\n$ echo same 1\nsame 1\n```\n")
    res = cde.check_file(f, str(tmp_path), 30, update=True)
    assert (res.bad, res.updated) == (1, 1)
    assert f.read_text() == "```\n$ echo 'total 41 of 7'\ntotal 41 of 7\n$ echo same 1\nsame 1\n```\n"
    assert cde.check_file(f, str(tmp_path), 30, update=False).bad == 0


def test_numbers_ignore_layout_and_timed_lines():
    a = ["│ step time (s) │ 10.02 │", "took 3.1 ms CPU"]
    b = ["│ step time (s)            │      10.02 │"]
    assert cde.numbers(a) == cde.numbers(b)


def test_elided_output_keeps_its_selection_of_rows():
    old = ["┏━━┓", "│ compute │ 7.41 │", "…", "│ stragglers │ 0.848 │", "wrapped tail of a line", "└──┘"]
    new = ["┏━━━┓", "│ compute   │ 7.40 │", "│ tp_comm │ 0.3 │", "│ stragglers │ 0.847 │", "└───┘"]
    assert cde.merge_elided(old, new) == ["┏━━━┓", "│ compute   │ 7.40 │", "…", "│ stragglers │ 0.847 │", "└───┘"]
