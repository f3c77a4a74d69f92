"""Sweep spaces, validation cases, deploy strings, traces and logs, each mutated one field or line at a time.

Sweep spaces run with ``--max-points 0`` (load and check only: the cap refuses any valid space), so a case costs
milliseconds; validation files always exit 0 and list every entry (bad ones counted as failed); deploy strings
stay one shell word / one YAML document; traces and logs (files only) count every line they skip."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, seed
from hypothesis import strategies as st

from clustertwin.safety import LINE_BREAKS
from tests.fuzz.harness import REPO, fuzz_settings, run, values, write_yaml

SPACE = {"name": "fz", "model": ["llama3-8b"], "node": ["dgx-h100"], "nodes": [2, 4], "fabric": ["ib-ndr"],
         "global_batch": [128], "layout": ["auto", {"tp": 8}], "checkpoint": [{"policy": "restart"}]}
SPACE_FIELDS = ["name", "mode", "samples", "seed", "tokens", "base", "usd_per_gpu_hour", "model", "node", "nodes",
                "fabric", "topology", "precision", "global_batch", "layout", "checkpoint"]
LAYOUT_FIELDS = ["tp", "pp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero", "sequence_parallel"]


@seed(22)
@fuzz_settings(150)
@given(field=st.sampled_from(SPACE_FIELDS), value=values(), in_list=st.booleans(), random=st.booleans())
def test_sweep_space_field(tmp_path_factory, field: str, value: object, in_list: bool, random: bool) -> None:
    data = {**SPACE, **({"mode": "random", "samples": 3} if random else {})}
    data[field] = [value] if in_list else value
    f = write_yaml(tmp_path_factory.getbasetemp() / "space.yaml", data)
    r = run("sweep", "sweep", str(f), "--out", str(tmp_path_factory.getbasetemp() / "o.parquet"), "--max-points", "0")
    assert r.code == 2  # either the field is rejected or the cap refuses the (valid) space


@seed(22)
@fuzz_settings(100)
@given(field=st.sampled_from([*LAYOUT_FIELDS, "policy", "interval_s", "hot_spares", "async_checkpoint"]),
       value=values())
def test_sweep_layout_and_checkpoint(tmp_path_factory, field: str, value: object) -> None:
    data = dict(SPACE)
    if field in LAYOUT_FIELDS:
        data["layout"] = [{"tp": 8, field: value}]
    else:
        data["checkpoint"] = [{"policy": "restart", field: value}]
    f = write_yaml(tmp_path_factory.getbasetemp() / "space2.yaml", data)
    r = run("sweep", "sweep", str(f), "--out", str(tmp_path_factory.getbasetemp() / "o.parquet"), "--max-points", "0")
    assert r.code == 2


CASES = {
    "infer": {"id": "i", "kind": "infer", "model": "llama3-8b", "gpu": "h100-sxm", "gpus": 1, "tp": 1,
              "precision": "fp8", "input_len": 128, "output_len": 128, "measured": {"output_tokens_per_s": 28836.0}},
    "collective": {"id": "c", "kind": "collective", "node": "dgx-h100", "nodes": 1, "gpus": 8, "op": "all_reduce",
                   "bytes": 4294967296, "measured": {"busbw_gb_per_s": 360}},
}


@seed(22)
@fuzz_settings(200)
@given(kind=st.sampled_from(sorted(CASES)), data=st.data(), value=values(), measured=st.booleans())
def test_validation_case_field(tmp_path_factory, kind: str, data, value: object, measured: bool) -> None:
    case = json.loads(json.dumps(CASES[kind]))
    if measured:
        case["measured"][next(iter(case["measured"]))] = value
    else:
        case[data.draw(st.sampled_from(sorted(k for k in case if k not in ("id", "kind"))))] = value
    good = json.loads(json.dumps(CASES[kind]))
    f = write_yaml(tmp_path_factory.getbasetemp() / "cases.yaml", {"cases": [case, good, 7]})
    r = run("validation cases", "validate", str(f), "--json")
    assert r.code == 0
    out = json.loads(r.stdout)
    assert out["summary"]["count"] == 3 and len(out["cases"]) == 3  # no entry dropped
    assert out["summary"]["failed"] >= 1  # the non-mapping entry at least
    bad = out["cases"][0]
    for k, v in bad.get("rel_error", {}).items():  # a scored case has finite, positive inputs
        assert v is not None, (k, bad)


BREAKS = sorted(set(LINE_BREAKS + "\x00\x1b\u202e$`'\";&|<>"))
hostile = st.text(alphabet=st.sampled_from([*BREAKS, "a", " ", "-", "/"]), min_size=1, max_size=12)
DEPLOY = ("--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--global-batch", "128", "--no-predict")


@seed(22)
@fuzz_settings(150)
@given(opt=st.sampled_from(["--partition", "--account", "--qos", "--time", "--log", "--job-name", "--script",
                            "--ib-hca", "--socket-ifname", "--namespace", "--queue", "--image", "--topology-label",
                            "--rdma-resource", "--flags", "--device", "--precision", "--recompute"]),
       text=hostile, k8s=st.booleans())
def test_deploy_strings(tmp_path_factory, opt: str, text: str, k8s: bool) -> None:
    out = tmp_path_factory.getbasetemp() / "out.txt"
    slurm_only = opt in ("--partition", "--account", "--qos", "--time", "--log")
    k8s_only = opt in ("--namespace", "--queue", "--image", "--topology-label", "--rdma-resource")
    k8s = (k8s or k8s_only) and not slurm_only
    r = run("deploy strings", "deploy", "k8s" if k8s else "slurm", *DEPLOY, opt, text, "-o", str(out))
    if r.code == 0 and k8s:
        docs = [d for d in yaml.safe_load_all(out.read_text(encoding="utf-8")) if d is not None]
        assert {d["kind"] for d in docs} <= {"PyTorchJob", "JobSet"} and all(
            set(d) <= {"apiVersion", "kind", "metadata", "spec"} for d in docs)
    if r.code == 0 and not k8s:
        header = [ln for ln in out.read_text(encoding="utf-8").splitlines() if ln.startswith("#SBATCH")]
        assert all("\u2028" not in ln and "\x85" not in ln for ln in header)


SWF = (REPO / "tests/fixtures/sched/small.swf").read_text().splitlines()
TRACE_JUNK = ['"', '""', "\x00", "\xff", ",,,,", "1e308", "nan", "-1", "9" * 30, "a" * 200_000, "\u2028", ";", ""]


def _swf_lines() -> st.SearchStrategy[list[str]]:
    return st.tuples(st.integers(0, len(SWF) - 1), st.sampled_from(TRACE_JUNK), st.integers(0, 80)).map(
        lambda t: [*SWF[:t[0]], SWF[t[0]][:t[2]] + t[1] + SWF[t[0]][t[2]:], *SWF[t[0] + 1:]])


@seed(22)
@fuzz_settings(100)
@given(lines=_swf_lines())
def test_swf_trace_counts_every_line(tmp_path_factory, lines: list[str]) -> None:
    f = tmp_path_factory.getbasetemp() / "t.swf"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    r = run("traces", "sched", "simulate", "-t", str(f), "-f", "swf", "--json")
    if r.code == 0:
        t = json.loads(r.stdout)["trace"]
        assert t["jobs"] + t["skipped_lines"] + sum(t.get("excluded", {}).values()) == t["lines"], t


PAI = REPO / "tests/fixtures/sched/pai2020_task.csv"
HELIOS = REPO / "tests/fixtures/sched/helios_cluster_log.csv"


@pytest.mark.parametrize("fmt,path", [("pai2020", PAI), ("helios", HELIOS)])
def test_csv_trace_stray_quote_resyncs(tmp_path, fmt: str, path) -> None:
    lines = path.read_text().splitlines()
    body = lines * (400 // len(lines) + 1)
    header, rows = (body[:1], [ln for ln in body if not ln.startswith("job_id")]) if fmt == "helios" else ([], body)
    rows = rows[:400]
    reports = {}
    for variant in ("clean", "broken"):
        body_rows = list(rows)
        if variant == "broken":  # one stray quote in one field
            body_rows[5] = body_rows[5].replace(",", ',"', 1)
        f = tmp_path / f"{variant}.{fmt}.csv"
        f.write_text("\n".join(header + body_rows) + "\n")
        r = run("traces", "sched", "simulate", "-t", str(f), "-f", fmt, "--json")
        reports[variant] = json.loads(r.stdout)["trace"]
    clean, broken = reports["clean"], reports["broken"]
    # the fixture has deliberately bad rows of its own: the quote damages its own row only, counted by cause
    assert broken["lines"] == clean["lines"], broken
    assert 1 <= broken["skipped_by_cause"].get("broken quote", 0) <= 2, broken
    assert clean["jobs"] - broken["jobs"] <= 1 and broken["skipped_lines"] - clean["skipped_lines"] <= 1, broken


LOG = (REPO / "tests/fixtures/ops/logs/train-job-4242.log").read_bytes()


@seed(22)
@fuzz_settings(80)
@given(pos=st.integers(0, 2000), junk=st.sampled_from([b"\xff", b"\xc3\x28", b"\r", b"\xe2\x80\xa8", b"\x85"]))
def test_dirty_log(tmp_path_factory, pos: int, junk: bytes) -> None:
    """Stray bytes in a text log still read the file (a binary or NUL-led file is counted as skipped)."""
    f = tmp_path_factory.getbasetemp() / "dirty.log"
    f.write_bytes(LOG[:pos] + junk + LOG[pos:])
    r = run("logs", "diagnose", str(f), "--json")
    assert json.loads(r.stdout)["files_read"] == 1


OOM = (REPO / "tests/fixtures/ops/logs/oom-rank0.log").read_bytes()


@pytest.mark.parametrize("damage", ["utf-16", "binary", "nul", "1.2.3", "400-digit"])
def test_ops_log_reproducers(tmp_path, damage: str) -> None:
    f = tmp_path / "x.log"
    data = {"utf-16": LOG.decode().encode("utf-16"), "binary": bytes(range(256)) * 64, "nul": b"\x00" + LOG,
            "1.2.3": OOM.replace(b"allocate 20.00 MiB", b"allocate 1.2.3 GiB"),
            "400-digit": OOM.replace(b"capacity of 79.15 GiB", b"capacity of " + b"9" * 400 + b" GiB")}[damage]
    f.write_bytes(data)
    r = run("logs", "diagnose", str(f), "--json")
    out = json.loads(r.stdout)
    if damage in ("binary", "nul"):  # not a text log: counted as skipped, never silently dropped
        assert out["files_read"] + out["files_skipped"] == 1 and out["files_skipped"] == 1, out
    else:
        assert out["files_read"] == 1, out
