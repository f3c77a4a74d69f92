"""``clustertwin infer simulate`` on the command line: every trace format, vLLM-compatible JSON,
malformed lines reported, hostile values rejected with one line, tables whole at 80 columns."""

from __future__ import annotations

import json

import pytest
from tests.conftest import FIXTURES, TRACES

from clustertwin.infer.fleet_metrics import VLLM_KEYS

SAMPLES = TRACES / "llm-serving"


@pytest.mark.parametrize("name", ["azure_llm_code_sample.csv", "burstgpt_sample.csv",
                                  "mooncake_conversation_sample.jsonl"])
def test_simulate_each_format_json(cli, name, tmp_path):
    out = tmp_path / "result.json"
    r = cli("infer", "simulate", "--trace", str(SAMPLES / name), "--model", "llama3-70b", "--tp", "2",
            "--replicas", "2", "--num-prompts", "300", "--slo-ttft-ms", "5000", "--save-result", str(out), "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) >= VLLM_KEYS and d["num_prompts"] == 300
    assert d["completed"] + d["rejected"] == 300
    assert json.loads(out.read_text())["completed"] == d["completed"]
    assert {"replicas", "gpu_busy_fraction", "p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms",
            "slo_attainment", "cost_usd"} <= set(d["windows"][0])


def test_malformed_lines_reported_on_stderr(cli):
    r = cli("infer", "simulate", "--trace", str(FIXTURES / "infer" / "azure_damaged.csv"), "--model", "llama3-8b",
            "--tp", "1", "--no-windows")
    assert r.code == 0, r.stderr
    assert "6 malformed" in r.stderr and "line 4: wrong field count" in r.stderr
    assert "1 excluded" in r.stderr


def test_disaggregated_compares_with_colocated(cli):
    r = cli("infer", "simulate", "--trace", "synthetic:poisson", "--request-rate", "2", "--duration-s", "60",
            "--input-len", "4000", "--output-len", "100", "--disaggregated", "--kv-path", "nvlink", "--no-windows")
    assert r.code == 0, r.stderr
    assert "disaggregated" in r.stdout and "co-located" in r.stdout and "KV transfer mean" in r.stdout


def test_tables_keep_numbers_whole_at_80_columns(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    from clustertwin.cli import common

    monkeypatch.setattr(common.console, "_width", 80, raising=False)
    r = cli("infer", "simulate", "--trace", "synthetic:bursty", "--request-rate", "20", "--duration-s", "600",
            "--model", "llama3-8b", "--tp", "1", "--slo-ttft-ms", "500")
    assert r.code == 0, r.stderr
    windows = r.stdout.split("per 60 s window")[1]
    assert "…" not in windows and windows.count("\n") > 10


@pytest.mark.parametrize("args", [
    ("--request-rate", "nan"), ("--replicas", "100000"), ("--window-s", "0"), ("--scale-interval-s", "0.001"),
    ("--duration-s", "inf"), ("--router", "least"), ("--batching", "dynamic"), ("--weights-from", "s3"),
    ("--trace", "synthetic:burst"),
])
def test_hostile_simulate_options_exit_2(cli, args):
    base = ["infer", "simulate", "--trace", "synthetic:poisson", "--model", "llama3-8b", "--tp", "1"]
    r = cli(*base, *args)
    assert r.code == 2, (r.code, r.stdout[-300:], r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1


def test_size_trace_rejects_options_it_would_ignore(cli):
    base = ["infer", "size", "--trace", "synthetic:poisson", "--slo-ttft-ms", "1000"]
    for extra in (["--disaggregated"],):  # --request-rate rescales a trace (infer size --help)
        r = cli(*base, *extra)
        assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1
