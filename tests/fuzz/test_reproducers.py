"""Every reproducer of issue 22 in the input/CLI layer: exit 2 with one line naming what is wrong, or a run that
completes and counts the damage. (Scheduler, inference-internal and diagnose items have their own tests.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fuzz.harness import run, write_yaml

TRAIN = ("train", "estimate", "--gpus", "8", "-b", "16", "--tp", "8", "--zero", "0")
SWEEP = "name: s\nmodel: [llama3-8b]\nnode: [dgx-h100]\nnodes: [2]\nfabric: [ib-ndr]\n"


def _one_error(tmp_path: Path, files: dict[str, bytes | str], *args: str, expect: str) -> None:
    for name, data in files.items():
        p = tmp_path / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
    r = run("reproducers", *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert r.code == 2, r.stdout[-300:]
    assert expect in r.stderr, r.stderr


CALIBRATION = [("gemm_efficiency: .nan", "finite"), ("gemm_efficiency: 0", "0 < value <= 1"),
               ("cp_overlap: 5", "0 <= value <= 1"), ("kernel_latency_s: -1", ">= 0"),
               ("gemm_eficiency: 0.5", "did you mean 'gemm_efficiency'")]


@pytest.mark.parametrize("line,expect", CALIBRATION, ids=[c[0] for c in CALIBRATION])
def test_calibration_train_ranges(tmp_path: Path, line: str, expect: str) -> None:
    _one_error(tmp_path, {"cal.yaml": f"train:\n  {line}\n"}, *TRAIN, "--calibration", "{tmp}/cal.yaml",
               expect=expect)


SPECS = [
    ("model", "preset: llama3-8b\nhidden: 1.0e+30\n", "hidden"),
    ("model", "preset: llama3-8b\nvocab: 9223372036854775808\n", "vocab"),
    ("model", "preset: llama3-8b\nvocab: 9223372036854775807\n", "physical limit"),
    ("model", "preset: llama3-8b\nlayers: " + "9" * 5000 + "\n", "4,300 digits"),
    ("model", b"preset: llama3-8b\nname: \xff\xfe\n", "byte 0xff at offset 24"),
    ("model", "\ufeffpreset: llama3-8b\nname: BOM is fine\nlayers: -1\n", "layers"),
    ("model", "preset: llama3-8b\nnotes: " + "[" * 100_000 + "]" * 100_000 + "\n", "nesting depth"),
    ("cluster", "preset: ref-1k-h100\nnetwork: {fabric: {preset: ib-ndr, achievable_fraction: 50}}\n", "less than or equal to 1"),
    ("cluster", "preset: ref-1k-h100\nstorage: {preset: lustre, read_gb_per_s: .inf}\n", "finite"),
]


@pytest.mark.parametrize("kind,text,expect", SPECS, ids=[f"{s[0]}-{s[2]}" for s in SPECS])
def test_spec_files(tmp_path: Path, kind: str, text: str | bytes, expect: str) -> None:
    flag = "-m" if kind == "model" else "-c"
    _one_error(tmp_path, {"s.yaml": text}, *TRAIN, flag, "{tmp}/s.yaml", expect=expect)


def test_deep_json(tmp_path: Path) -> None:
    _one_error(tmp_path, {"m.json": '{"preset": "llama3-8b", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"},
               *TRAIN, "-m", "{tmp}/m.json", expect="nested deeper than 64")


FLAGS = [
    (("train", "estimate", "--gpus", "8", "-b", "16", "--tp", "8", "--tokens", "inf"), "--tokens must be a finite"),
    (("train", "estimate", "--gpus", "8", "-b", "16", "--tp", "8", "--usd-per-gpu-hour", "-3"), ">= 0"),
    (("infer", "estimate", "--gpus", "1", "--num-requests", "-5"), "--num-requests must be >= 1"),
    (("infer", "estimate", "--gpus", "1", "--request-rate", "nan"), "--request-rate must be a finite"),
    (("infer", "estimate", "--gpus", "1", "--length-cv", "nan"), "--length-cv must be a finite"),
    (("infer", "size", "--request-rate", "nan", "--slo-ttft-ms", "1", "--slo-tpot-ms", "1"), "--request-rate must be a finite"),
    (("comm", "all_reduce", "--step-factor", "nan"), "--step-factor must be a finite"),
    (("comm", "all_reduce", "-b", "1.5.5K"), "size '1.5.5K'"),
    (("train", "search", "--gpus", "64", "-b", "64", "--ep", "9999999999999999999"), "--ep must be at most"),
    (("train", "search", "--gpus", "64", "-b", "64", "--cp", "0"), "--cp must be >= 1"),
    (("train", "search", "--gpus", "64", "-b", "64", "--ep", "0"), "--ep must be >= 1"),
    (("sched", "simulate", "-t", "tests/fixtures/sched/small.swf", "-f", "swf", "--node-mtbf-h", "nan"), "finite"),
    (("sched", "simulate", "-t", "tests/fixtures/sched/small.swf", "-f", "swf", "--node-mttr-h", "nan"), "finite"),
    (("train", "search", "--tpp", "2"), "No such option: --tpp"),
    (("train", "estimate", "--tp", "x", "-b", "8"), "Invalid value for '--tp'"),
]


@pytest.mark.parametrize("args,expect", FLAGS, ids=[" ".join(f[0][-2:]) for f in FLAGS])
def test_cli_flags(tmp_path: Path, args: tuple[str, ...], expect: str) -> None:
    _one_error(tmp_path, {}, *args, expect=expect)


@pytest.mark.parametrize("json_out", [False, True])
def test_no_valid_layout_exits_2_in_text_and_json(json_out: bool) -> None:
    args = ("train", "search", "-m", "llama3-70b", "--gpus", "8", "-b", "8", "--tp", "1", "--pp", "1")
    r = run("reproducers", *args, *(("--json",) if json_out else ()))
    assert r.code == 2 and ("no valid layout fits" in r.stderr or "no layout fits" in r.stderr)


def test_sweep_inputs(tmp_path: Path) -> None:
    _one_error(tmp_path, {"s.yaml": SWEEP + "layout: [{tp: 8, micro_batch: 1.0e+30}]\n"}, "sweep", "{tmp}/s.yaml",
               expect="micro_batch")
    _one_error(tmp_path, {"s.yaml": SWEEP + "mode: random\nsamples: 1.0e+9\n"}, "sweep", "{tmp}/s.yaml",
               expect="exceeds the grid")
    _one_error(tmp_path, {"s.yaml": SWEEP}, "sweep", "{tmp}/s.yaml", "--out", "{tmp}/missing/r.parquet",
               expect="does not exist")
    _one_error(tmp_path, {"s.yaml": b"name: \xc3\x28\n"}, "sweep", "{tmp}/s.yaml", expect="not UTF-8")


def test_exporter_rules_in_missing_directory(tmp_path: Path) -> None:
    _one_error(tmp_path, {}, "exporter", "--rules", "{tmp}/missing/rules.yaml", expect="does not exist")


def test_validate_counts_bad_cases_and_never_aborts(tmp_path: Path) -> None:
    good = {"kind": "infer", "model": "llama3-8b", "gpu": "h100-sxm", "gpus": 1, "tp": 1, "precision": "fp8",
            "input_len": 128, "output_len": 128, "measured": {"output_tokens_per_s": 28836.77}}
    bad = {"inf": {"output_len": float("inf")}, "neg": {"gpus": -8},
           "nanm": {"measured": {"output_tokens_per_s": float("nan")}},
           "negm": {"measured": {"output_tokens_per_s": -5}}, "big": {"gpus": 2**63}}
    cases = [{**good, "id": "ok"}] + [{**good, **change, "id": cid} for cid, change in bad.items()]
    f = write_yaml(tmp_path / "cases.yaml", {"cases": cases})
    (tmp_path / "bad.yaml").write_bytes(b"\xff\xfe\x00")
    r = run("reproducers", "validate", str(f), str(tmp_path / "bad.yaml"), "--json")
    assert r.code == 0
    out = json.loads(r.stdout)
    by_id = {c["id"]: c for c in out["cases"]}
    assert "error" not in by_id["ok"]
    assert {k for k, c in by_id.items() if "error" in c} == {*bad, "bad.yaml#0"}
    assert out["summary"]["count"] == 7 and out["summary"]["failed"] == 6
