"""Damaged traces never raise: a truncated gzip or JSON document keeps what was read and counts the break;
events without their fields and unknown kinds are counted by cause; a file with no event at all is one
error line (exit 2). Plus a seeded fuzz of byte-level damage: 0 tracebacks."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from clustertwin.errors import SpecError
from clustertwin.profile.kineto import read_kineto
from clustertwin.profile.report import profile
from tests.conftest import FIXTURES, run_cli

SMALL = FIXTURES / "profile" / "hta" / "mi250_rocm6_2.json.gz"
GLOO0 = FIXTURES / "profile" / "gloo_tp2dp2" / "plain" / "rank0.json.gz"


def _write(tmp: Path, name: str, data: bytes) -> Path:
    p = tmp / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("stream", [True, False], ids=["ijson-if-installed", "json"])
def test_truncated_gzip_keeps_the_events_before_the_cut(tmp_path: Path, stream: bool):
    raw = GLOO0.read_bytes()
    cut = _write(tmp_path, "cut.json.gz", raw[: len(raw) // 2])
    full = read_kineto(GLOO0, stream=stream)
    t = read_kineto(cut, stream=stream)
    assert 0 < sum(t.event_kinds.values()) < sum(full.event_kinds.values())
    assert any(k.startswith("trace cut short after") for k in t.damage), t.damage
    r = run_cli("profile", str(cut))
    assert r.code == 0 and "Traceback" not in r.stdout + r.stderr
    assert "trace cut short after" in r.stdout


@pytest.mark.parametrize("stream", [True, False], ids=["ijson-if-installed", "json"])
def test_truncated_json_text(tmp_path: Path, stream: bool):
    text = gzip.decompress(SMALL.read_bytes())
    p = _write(tmp_path, "cut.json", text[: int(len(text) * 0.7)])
    t = read_kineto(p, stream=stream)
    assert sum(t.event_kinds.values()) > 0 and any("cut short" in k for k in t.damage)


@pytest.mark.parametrize("data", [b"this is not json", b"", b"\x1f\x8b\x08garbage", b"[1, 2", b"{\"traceEvents\": 5}"])
def test_a_file_without_events_is_one_error_line(tmp_path: Path, data: bytes):
    p = _write(tmp_path, "bad.json", data)
    with pytest.raises(SpecError, match="no trace events read"):
        profile([p])
    r = run_cli("profile", str(p))
    assert r.code == 2, (r.stdout, r.stderr)
    assert r.stderr.count("error:") == 1 and "Traceback" not in r.stderr and str(p) in r.stderr


def test_missing_path_and_empty_folder(tmp_path: Path):
    r = run_cli("profile", str(tmp_path / "nope.json"))
    assert r.code == 2 and "no such file or folder" in r.stderr
    r = run_cli("profile", str(tmp_path))
    assert r.code == 2 and "no trace files" in r.stderr


def test_fields_missing_or_wrong_are_counted(tmp_path: Path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "tid": 1},
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 10, "dur": 20, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "no_ts", "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "neg", "ts": 1, "dur": -5},
        {"ph": "X", "cat": "kernel", "name": 42, "ts": 1, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "nan", "ts": "soon", "dur": 5},
        {"ph": "X", "cat": "brand_new_kind", "name": "x", "ts": 1, "dur": 1},
        "not an object",
        {"cat": "kernel", "name": "no ph", "ts": 1, "dur": 1},
    ]
    p = _write(tmp_path, "fields.json", json.dumps({"traceEvents": events}).encode())
    t = read_kineto(p)
    assert t.damage["complete event without numeric ts/dur or name"] == 4
    assert t.damage["event not an object"] == 1
    assert t.damage["unknown event category 'brand_new_kind'"] == 1
    assert t.event_kinds["ph missing"] == 1
    (r,) = profile([p]).ranks
    (s,) = r.steps
    assert s["compute_by_class_s"]["gemm"] == pytest.approx(20e-6)
    out = run_cli("profile", str(p), "--json")
    assert out.code == 0
    assert json.loads(out.stdout)["damage"]["event not an object"] == 1


def test_a_bare_event_array_is_read(tmp_path: Path):
    events = [{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 10, "dur": 20, "args": {"stream": 7}}]
    p = _write(tmp_path, "array.json", json.dumps(events).encode())
    for stream in (True, False):
        t = read_kineto(p, stream=stream)
        assert len(t.activity) == 1 and not t.damage


def test_the_json_fallback_reads_what_the_stream_reads():
    a, b = read_kineto(GLOO0), read_kineto(GLOO0, stream=False)
    assert a.event_kinds == b.event_kinds and a.damage == b.damage
    assert [(x.ts, x.end, x.term, x.kind) for x in a.activity] == [(x.ts, x.end, x.term, x.kind) for x in b.activity]


def test_fuzzed_bytes_never_raise(tmp_path: Path):
    text = gzip.decompress(SMALL.read_bytes())
    rng = random.Random(30)
    for i in range(40):
        data = bytearray(text)
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[pos] = rng.randrange(256)
            else:
                del data[pos: pos + rng.randint(1, 200)]
        raw = gzip.compress(bytes(data)) if i % 2 else bytes(data)
        p = _write(tmp_path, f"f{i}.json.gz", raw[: rng.randint(len(raw) // 2, len(raw))] if i % 5 == 0 else raw)
        try:
            rep = profile([p])
        except SpecError:
            continue
        for r in rep.ranks:
            for s in r.steps:
                assert s["wall_s"] >= 0
