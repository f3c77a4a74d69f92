"""The input layer: strict and lenient decoding, document limits, CSV resynchronisation and counted damage,
range-checked numbers."""

from __future__ import annotations

import pytest

from clustertwin import inputs
from clustertwin.errors import SpecError


def test_csv_stray_quote_damages_one_row() -> None:
    """A 400-line trace with one stray quote: 399 rows read, 1 damaged, the rest never swallowed."""
    lines = [f"job{i},user{i},8,Terminated,{i},{i + 60}\n" for i in range(400)]
    lines[68] = 'job68,"user68,8,Terminated,68,128\n'
    lines[200] = "job200,too,few\n"
    lines[300] = "job300," + "x" * (inputs.MAX_FIELD_BYTES + 1) + ",8,Terminated,1,2\n"
    damage = inputs.RowDamage()
    rows = list(inputs.csv_rows(lines, fields=6, damage=damage))
    assert len(rows) == 397 and damage.total == 3
    assert dict(damage.causes) == {"broken quote": 1, "wrong field count": 1, "field too large": 1}
    assert "first at line 69" in damage.summary()
    assert len(rows) + damage.total == len(lines)  # no silent drop


def test_decoding() -> None:
    with pytest.raises(SpecError, match="byte 0xff at offset 3"):
        inputs.decode_text(b"ab\n\xff", "f.yaml")
    with pytest.raises(SpecError, match="UTF-16"):
        inputs.decode_text("x".encode("utf-16"), "f.yaml")
    assert inputs.decode_text("\ufeffa: 1".encode()) == "a: 1"
    dirty = inputs.decode_dirty(b"ok \xff\xfe line\n")
    assert dirty.bad_bytes == 2 and dirty.text.startswith("ok ")
    assert inputs.decode_dirty("log".encode("utf-16")).text == "log"


def test_document_limits() -> None:
    with pytest.raises(SpecError, match="nested deeper than 64"):
        inputs.parse_document("[" * 65 + "]" * 65)
    with pytest.raises(SpecError, match="digits"):
        inputs.parse_document("a: " + "9" * 5000)
    with pytest.raises(SpecError, match="out of range"):
        inputs.parse_document("a: [1, 9223372036854775808]")
    assert inputs.parse_document("[" * 60 + "]" * 60)


@pytest.mark.parametrize("text,kw,ok", [
    ("8", {}, 8), ("8.0", {}, 8), (" 12 ", {}, 12), ("-1", {}, None), ("1.5", {}, None), ("nan", {}, None),
    ("9223372036854775808", {}, None), ("1e400", {}, None), ("x", {}, None), ("-3", {"min_value": None}, -3),
])
def test_parse_int(text: str, kw: dict, ok: int | None) -> None:
    if ok is None:
        with pytest.raises(SpecError):
            inputs.parse_int(text, "gpus", **kw)
    else:
        assert inputs.parse_int(text, "gpus", **kw) == ok


@pytest.mark.parametrize("text,kw,ok", [
    ("1.5", {}, 1.5), ("nan", {}, None), ("inf", {}, None), ("-1", {}, None), ("0", {"positive": True}, None),
    ("1e3", {"max_value": 100}, None), ("1" * 100, {}, None), ("-2", {"min_value": None}, -2.0),
])
def test_parse_float(text: str, kw: dict, ok: float | None) -> None:
    if ok is None:
        with pytest.raises(SpecError):
            inputs.parse_float(text, "rate", **kw)
    else:
        assert inputs.parse_float(text, "rate", **kw) == ok
