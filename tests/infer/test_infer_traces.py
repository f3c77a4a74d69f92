"""Trace readers (Azure LLM, BurstGPT, Mooncake) and the synthetic generator: every line accounted for,
exact column layouts, burst shapes as specified."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import FIXTURES, TRACES, need_shared

from clustertwin.errors import SpecError
from clustertwin.infer.synthetic import SyntheticSpec, diurnal_beta, generate
from clustertwin.infer.traces import azure_timestamp, read_trace

SAMPLES = TRACES / "llm-serving"


def _accounted(tr) -> None:
    rep = tr.report
    assert rep.lines == rep.requests + rep.bad_lines + sum(rep.excluded.values())
    assert rep.requests == len(tr)


def test_damaged_azure_trace_counts_every_line():
    tr = read_trace(FIXTURES / "infer" / "azure_damaged.csv")
    rep = tr.report
    _accounted(tr)
    assert (rep.lines, rep.requests) == (11, 4)
    assert rep.bad == {"wrong field count": 2, "bad ContextTokens": 2, "bad TIMESTAMP": 2}
    assert rep.excluded["failed request (0 output tokens)"] == 1
    assert rep.first_bad[0].startswith("line 4: wrong field count")  # the stray quote damages its own row only
    # 7 fractional digits and a UTC offset both parse; arrivals are rebased and sorted
    assert tr.arrival_s[0] == 0 and np.all(np.diff(tr.arrival_s) >= 0)
    assert tr.arrival_s[-1] == pytest.approx(56.0 - 46.68059, abs=1e-6)
    assert azure_timestamp("2024-05-10 00:00:01.5+01:00") == pytest.approx(azure_timestamp("2024-05-09 23:00:01.5"))


def test_one_broken_quote_in_400_lines_damages_one_row(tmp_path):
    rows = [f"2023-11-16 18:{i // 60:02d}:{i % 60:02d}.0000000,{100 + i},{10 + i % 7}" for i in range(400)]
    rows[137] = '2023-11-16 18:02:17.0000000,"237,12'
    p = tmp_path / "azure.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    tr = read_trace(p)
    assert tr.report.lines == 400 and len(tr) == 399 and tr.report.bad_lines == 1


def test_damaged_mooncake_trace_counts_every_line():
    tr = read_trace(FIXTURES / "infer" / "mooncake_damaged.jsonl")
    _accounted(tr)
    assert tr.report.bad == {"bad JSON": 2, "missing key": 1, "bad hash_ids": 1}
    assert "missing key: 'input_length'; did you mean 'input_len'" in tr.report.first_bad[2]
    assert tr.prefix_blocks == [(1, 2), (1,)]


@pytest.mark.parametrize("name, fmt", [("azure_llm_code_sample.csv", "azure"), ("burstgpt_sample.csv", "burstgpt"),
                                       ("mooncake_conversation_sample.jsonl", "mooncake")])
def test_sample_traces_in_published_layouts(name, fmt):
    path = need_shared(SAMPLES / name)
    tr = read_trace(path)
    assert tr.report.format == fmt and tr.report.bad_lines == 0
    _accounted(tr)
    header = path.read_text().splitlines()[0]
    if fmt == "azure":
        assert header == "TIMESTAMP,ContextTokens,GeneratedTokens"
        assert 3.0 < tr.peak_to_mean(60) < 5.0  # shaped after Azure code 2023 (4.16)
    elif fmt == "burstgpt":
        assert header == "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
        failed = sum(1 for line in path.read_text().splitlines()[1:] if line.split(",")[3] == "0")
        assert tr.report.excluded["failed request (0 output tokens)"] == failed > 0
    else:
        assert tr.prefix_blocks is not None and tr.block_tokens == 512
        assert all(len(b) == -(-n // 512) for b, n in zip(tr.prefix_blocks, tr.input_len, strict=True))


def test_bad_files_are_one_line_errors(tmp_path):
    p = tmp_path / "utf16.csv"
    p.write_bytes("TIMESTAMP,ContextTokens,GeneratedTokens\n".encode("utf-16"))
    with pytest.raises(SpecError, match="not UTF-8 text: byte 0xff at offset 0"):
        read_trace(p, "azure")
    p = tmp_path / "cols.csv"
    p.write_text("TIMESTAMP,ContextToken,GeneratedTokens\n2023-11-16 18:15:46.6805900,1,1\n")
    with pytest.raises(SpecError, match="did you mean 'ContextToken'"):
        read_trace(p, "azure")
    p.write_text("a,b\n1,2\n")
    with pytest.raises(SpecError, match="unknown trace format"):
        read_trace(p)
    with pytest.raises(SpecError, match="did you mean 'azure'"):
        read_trace(p, "azur")
    with pytest.raises(SpecError, match="trace not found"):
        read_trace(tmp_path / "missing.csv")


def test_head_and_rate_rescaling():
    tr = generate(SyntheticSpec(kind="bursty", rate=5, duration_s=600, seed=2))
    fast = tr.with_rate(20.0)
    assert fast.mean_rate == pytest.approx(20.0, rel=1e-9)
    # the same burst shape, compressed in time by the rate ratio
    assert fast.peak_to_mean(60 * tr.mean_rate / 20.0) == pytest.approx(tr.peak_to_mean(60), rel=1e-6)
    assert len(tr.head(100)) == 100


def test_synthetic_shapes():
    kw = {"rate": 50.0, "duration_s": 3600.0, "seed": 1}
    poisson = generate(SyntheticSpec(kind="poisson", **kw))
    bursty = generate(SyntheticSpec(kind="bursty", peak_to_mean=4, **kw))
    diurnal = generate(SyntheticSpec(kind="diurnal", peak_to_mean=3.5, period_s=3600, **kw))
    for tr in (poisson, bursty, diurnal):
        assert tr.mean_rate == pytest.approx(50.0, rel=0.03)
    assert poisson.peak_to_mean(60) < 1.15
    assert 3.6 < bursty.peak_to_mean(60) < 4.6
    assert 3.1 < diurnal.peak_to_mean(60) < 3.9
    gaps = np.diff(generate(SyntheticSpec(kind="poisson", burstiness=0.25, **kw)).arrival_s)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(2.0, rel=0.1)  # Gamma shape k: CV = 1/sqrt(k)
    assert np.exp(diurnal_beta(3.5)) / np.i0(diurnal_beta(3.5)) == pytest.approx(3.5, rel=1e-9)
    a, b = generate(SyntheticSpec(kind="bursty", **kw)), generate(SyntheticSpec(kind="bursty", **kw))
    assert np.array_equal(a.arrival_s, b.arrival_s)


@pytest.mark.parametrize("kw, match", [({"rate": float("nan")}, "rate: must be"),
                                       ({"kind": "bursty", "burst_fraction": 0.3}, "burst_fraction x peak_to_mean"),
                                       ({"kind": "bursti"}, "did you mean 'bursty'"),
                                       ({"rate": 1e6, "duration_s": 1e6}, "exceeds the cap"),
                                       ({"peak_to_mean": 0.5}, "peak_to_mean")])
def test_synthetic_rejects_bad_parameters(kw, match):
    with pytest.raises(SpecError, match=match):
        generate(SyntheticSpec(**kw))


def test_cr_only_line_endings_and_bom(tmp_path):
    p = tmp_path / "cr.csv"
    p.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r2023-11-16 18:15:46.6805900,374,44\r"
                  b"2023-11-16 18:15:47.0,10,x\r2023-11-16 18:15:48.0,20,2\r")
    tr = read_trace(p)
    assert len(tr) == 2 and tr.report.first_bad == ["line 3: bad GeneratedTokens: 'x' is not a number"]
