"""``clustertwin infer estimate|size`` on the command line."""

from __future__ import annotations

import json


def test_estimate_json(cli):
    r = cli("infer", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--precision", "fp8",
            "--input-len", "128", "--output-len", "128", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["mode"] == "offline"
    assert d["output_tokens_per_s"] > 1000
    assert {"ttft_ms", "tpot_ms", "memory", "breakdown", "kv_precision"} <= set(d)


def test_estimate_table_and_request_rate(cli):
    r = cli("infer", "estimate", "--model", "llama3-70b", "--tp", "4", "--input-len", "467", "--output-len", "256",
            "--request-rate", "4", "--num-requests", "200")
    assert r.code == 0, r.stderr
    assert "TTFT" in r.stdout and "request_rate" in r.stdout


def test_size_json(cli):
    r = cli("infer", "size", "--qps", "10", "--input-len", "1024", "--output-len", "256", "--slo-ttft-ms", "1000",
            "--slo-tpot-ms", "50", "--model", "llama3-70b", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["best"]["gpus"] >= 2
    assert d["best"]["usd_per_million_output_tokens"] > 0
    assert "meets_slo" in d["verification"]


def test_bad_input_is_one_line_exit_2(cli):
    r = cli("infer", "estimate", "--model", "llama3-70b", "--tp", "1", "--precision", "bf16")
    assert r.code == 2
    assert "does not fit" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("infer", "estimate", "--model", "llama3-7b")
    assert r.code == 2 and "did you mean" in r.stderr
    r = cli("infer", "size", "--qps", "1", "--input-len", "10", "--output-len", "10", "--slo-ttft-ms", "100",
            "--slo-tpot-ms", "10", "--precision", "fp9")
    assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1


def test_vllm_flag_names_and_result_keys(cli):
    r = cli("infer", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--precision", "fp8",
            "--request-rate", "2", "--num-prompts", "50", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["breakdown"]["simulation"]["requests"] == 50
    assert d["output_throughput"] == d["output_tokens_per_s"] and d["mean_ttft_ms"] == d["ttft_ms"]
    r = cli("infer", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--max-concurrency", "4", "--json")
    assert r.code == 0 and json.loads(r.stdout)["mode"] == "concurrency"


def test_size_table_keeps_numbers_whole_at_80_columns(cli, monkeypatch):
    from clustertwin.cli import common

    monkeypatch.setattr(common.console, "_width", 80, raising=False)
    r = cli("infer", "size", "--qps", "20", "--input-len", "1024", "--output-len", "256", "--slo-ttft-ms", "1000",
            "--slo-tpot-ms", "50", "--model", "llama3-70b", "--no-verify")
    assert r.code == 0, r.stderr
    assert "…" not in r.stdout
    import json

    from clustertwin.cli.common import fmt

    js = cli("infer", "size", "--qps", "20", "--input-len", "1024", "--output-len", "256", "--slo-ttft-ms", "1000",
             "--slo-tpot-ms", "50", "--model", "llama3-70b", "--no-verify", "--json")
    for c in json.loads(js.stdout)["candidates"]:
        if c["feasible"]:
            assert fmt(float(c["replica_qps"])) in r.stdout
