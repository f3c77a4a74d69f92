"""The docs-example checker (tools/check_doc_examples.py) finds examples and keeps abbreviated outputs."""

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
    (ex,) = cde.examples(f)
    assert ex.command == "clustertwin comm all_reduce  -b 8 -e 16"
    assert ex.expected == ["#  size  time", "      8   12.5"]
    assert f.read_text().splitlines()[ex.end - len(ex.expected):ex.end] == ex.expected


def test_numbers_ignore_layout_and_timed_lines():
    a = ["│ step time (s) │ 10.02 │", "took 3.1 ms CPU"]
    b = ["│ step time (s)            │      10.02 │"]
    assert cde.numbers(a) == cde.numbers(b)


def test_elided_output_keeps_its_selection_of_rows():
    old = ["┏━━┓", "│ compute │ 7.41 │", "…", "│ stragglers │ 0.848 │", "wrapped tail of a line", "└──┘"]
    new = ["┏━━━┓", "│ compute   │ 7.40 │", "│ tp_comm │ 0.3 │", "│ stragglers │ 0.847 │", "└───┘"]
    assert cde.merge_elided(old, new) == ["┏━━━┓", "│ compute   │ 7.40 │", "…", "│ stragglers │ 0.847 │", "└───┘"]
