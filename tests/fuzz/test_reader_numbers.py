"""Issue 28, "every malformed number is exit 2" and "every drop counted", for the file readers: nccl-tests logs,
Mooncake traces, node files (ibstat, nvidia-smi -q, perfquery, inventories), metrics CSVs, node lists and
validation files. Each case is a reproducer of the fuzz campaign: exit 2 with one ``error:`` line naming the file
(and line or field), or exit 0 with the skipped rows counted by cause in text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, seed
from hypothesis import strategies as st

from clustertwin.infer.traces import read_trace
from tests.conftest import run_cli
from tests.fuzz.harness import HOSTILE_NUMBERS, REPO, fuzz_settings, run

NCCL = REPO / "tests/fixtures/nccl_tests"
NCCL_LOG = (NCCL / "gcp_a3mega_2node_all_reduce_perf.log").read_text()
NCCL_CLUSTER = str(NCCL / "gcp-a3mega-2vm.yaml")
ROW = "      131072         32768     float     sum      -1    159.3    0.82    1.54      0"
OPS = REPO / "tests/fixtures/ops"
BIG = "9" * 400


def _calibrate(tmp_path: Path, text: str, *flags: str):
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(text)
    return run("nccl-tests numbers", "calibrate", "--nccl-tests", str(log), "-c", NCCL_CLUSTER,
               "-o", str(tmp_path / "cal.yaml"), *flags)


NCCL_ROWS = [("159.3", "inf", "not finite"), ("159.3", "1e-320", "time out of range"), ("159.3", "0", "time <= 0"),
             ("159.3", "nan", "not finite"), ("159.3", "-5", "time <= 0"), ("159.3", "1e309", "not finite"),
             ("1.54      0", "1.54      inf", "not finite"), ("131072 ", BIG + " ", "out of range")]


@pytest.mark.parametrize("old,new,cause", NCCL_ROWS, ids=[f"{n[:12]}-{c}" for _, n, c in NCCL_ROWS])
def test_nccl_tests_row_number_is_counted_malformed(tmp_path: Path, old: str, new: str, cause: str) -> None:
    assert ROW in NCCL_LOG
    r = _calibrate(tmp_path, NCCL_LOG.replace(ROW, ROW.replace(old, new, 1)), "--json")
    assert r.code == 0, r.stderr
    lg = json.loads(r.stdout)["logs"][0]
    assert (lg["rows"], lg["malformed"], lg["malformed_by_cause"]) == (30, 1, {cause: 1}), lg
    assert json.loads(r.stdout)["timings_used"] == 60  # the row's two timings are left out of the fit


def test_nccl_tests_malformed_rows_named_in_text(tmp_path: Path) -> None:
    r = _calibrate(tmp_path, NCCL_LOG.replace(ROW, ROW.replace("159.3", "nan")) + "  4096 1024 float sum -1 x\n")
    assert r.code == 0, r.stderr
    assert "2 malformed line(s) left out" in " ".join(r.stdout.split()), r.stdout
    assert "1 not finite (first at line 46)" in " ".join(r.stdout.split())


@pytest.mark.parametrize("header,expect", [("nGpus 1 minBytes", f"nGpus {BIG} minBytes"),
                                           ("nGpus 1 minBytes", "nGpus 0 minBytes")])
def test_nccl_tests_header_number_is_exit_2_naming_line(tmp_path: Path, header: str, expect: str) -> None:
    r = _calibrate(tmp_path, NCCL_LOG.replace(header, expect, 1))
    assert r.code == 2
    assert "all_reduce_perf.log: line 9: nGpus" in r.stderr, r.stderr


def test_nccl_tests_log_of_only_bad_rows_is_exit_2(tmp_path: Path) -> None:
    text = "# Collective test starting: all_reduce_perf\n  8 2 float sum -1 inf 0.00 0.00 0 nan 0.00 0.00 0\n"
    r = _calibrate(tmp_path, text)
    assert r.code == 2 and "no nccl-tests data rows found (1 malformed lines: 1 not finite" in r.stderr, r.stderr


def test_mooncake_huge_lengths_and_timestamp_are_counted(tmp_path: Path) -> None:
    lines = [f'{{"timestamp": {i * 100}, "input_length": 100, "output_length": 10}}' for i in range(5)]
    lines += ['{"timestamp": 600, "input_length": 100, "output_length": 1' + "0" * 400 + "}",
              '{"timestamp": 1' + "0" * 400 + ', "input_length": 100, "output_length": 5}',
              '{"timestamp": 700, "input_length": 1' + "0" * 400 + ', "output_length": 5}']
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(lines) + "\n")
    # run_cli, not the harness: the trace report's per-line examples are indented continuation lines on
    # stderr (infer_fleet_cmd.report_trace's format); the contract checked here is exit 0 and every line counted
    r = run_cli("infer", "simulate", "--trace", str(f), "--model", "llama3-8b", "--tp", "1", "--no-windows", "--json")
    assert r.code == 0 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    rep = read_trace(f).report
    assert (rep.lines, rep.requests, rep.bad_lines) == (8, 5, 3)
    err = " ".join(r.stderr.split())
    assert "5 requests from 8 lines" in err and "3 malformed" in err, err
    assert "bad output_length 1" in err and "bad timestamp 1" in err and "bad input_length 1" in err


def test_ibstat_rate_1_5_5_is_exit_2_naming_line(tmp_path: Path) -> None:
    f = tmp_path / "ibstat.txt"
    f.write_text((OPS / "ibstat.txt").read_text().replace("Rate: 400", "Rate: 1.5.5", 1))
    r = run("node files", "node", "check", "--offline", "--ibstat", str(f))
    assert r.code == 2 and f"{f}: line 11: Rate: expected a number, got '1.5.5'" in r.stderr, r.stderr
    r = run("node files", "diagnose", str(f), "--json")  # a log folder: counted, the other ports still read
    titles = [x["title"] for x in json.loads(r.stdout)["findings"]]
    assert any(t.startswith("1 malformed line") for t in titles) and any("is Down" in t for t in titles), titles


@pytest.mark.parametrize("key", ["Replays Since Reset               : 0", "SRAM Correctable              : 0"])
def test_nvidia_smi_400_digit_counter_is_exit_2_naming_line(tmp_path: Path, key: str) -> None:
    text = (OPS / "nvidia-smi-q-h100.txt").read_text()
    f = tmp_path / "smi.txt"
    f.write_text(text.replace(key, key[:-1] + BIG, 1))
    line = text[:text.index(key)].count("\n") + 1
    r = run("node files", "node", "check", "--offline", "--smi-q", str(f))
    assert r.code == 2 and f"{f}: line {line}: expected a finite number" in r.stderr, r.stderr


def test_perfquery_counter_beyond_int64_is_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "pq.txt"
    f.write_text((OPS / "perfquery-mlx5_3.txt").read_text().replace("..4127", ".." + "9" * 30, 1))
    r = run("node files", "node", "check", "--offline", "--ibstat", str(OPS / "ibstat.txt"),
            "--perfquery", f"mlx5_3={f}")
    assert r.code == 2 and f"{f}: line 4: SymbolErrorCounter" in r.stderr, r.stderr


@pytest.mark.parametrize("field,value,expect", [("catalog_id", 5, "gpus[0].catalog_id: expected a string, got int 5"),
                                                ("name", ["x"], "gpus[0].name: expected a string"),
                                                ("gpus", 3, "gpus: expected a list")])
def test_inventory_wrong_type_lists_the_file_as_unreadable(tmp_path: Path, field: str, value: object,
                                                           expect: str) -> None:
    for p in (OPS / "inventory").glob("gpu-a0*.json"):
        (tmp_path / p.name).write_text(p.read_text())
    doc = json.loads((tmp_path / "gpu-a01.json").read_text())
    if field == "gpus":
        doc["gpus"] = value
    else:
        doc["gpus"][0][field] = value
    (tmp_path / "gpu-a01.json").write_text(json.dumps(doc))
    r = run("node files", "node", "check", "--inventory", str(tmp_path), "--json")
    assert r.code == 0, r.stderr
    bad = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "INVENTORY_UNREADABLE"]
    assert bad and bad[0]["title"] == "1 inventory file(s) not read", bad
    ev = bad[0]["evidence"][0]
    assert ev["file"] == "gpu-a01.json" and ev["text"].startswith(expect), ev


def test_inventory_nan_is_not_a_number(tmp_path: Path) -> None:
    for p in (OPS / "inventory").glob("gpu-a0*.json"):
        (tmp_path / p.name).write_text(p.read_text())
    f = tmp_path / "gpu-a02.json"
    f.write_text(f.read_text().replace('"gpus"', '"x": NaN, "gpus"', 1))
    r = run("node files", "node", "check", "--inventory", str(tmp_path), "--json")
    bad = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "INVENTORY_UNREADABLE"]
    assert bad and "NaN is not a JSON number" in bad[0]["evidence"][0]["text"], bad


def test_metrics_csv_128k_header_field_is_a_skipped_file(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text("time,gpu_util," + "x" * 140_000 + "\n1,5,3\n")
    r = run("metrics csv", "diagnose", str(f), "--json")
    out = json.loads(r.stdout)
    assert (out["files_read"], out["files_skipped"]) == (0, 1), out
    ev = next(f for f in out["findings"] if f["code"] == "BINARY_SKIPPED")["evidence"][0]
    assert ev["line"] == 1 and "header unreadable: 1 field too large" in ev["text"], ev
    r = run("metrics csv", "diagnose", str(f))
    assert r.code == 0 and "0 file(s), 0 line(s) read, 1 file(s) not read;" in r.stdout, r.stdout


def test_metrics_csv_128k_row_field_is_a_malformed_row(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text("time,gpu_util,iowait\n1,5," + "9" * 140_000 + "\n2,5,50\n3,nan,50\n")
    out = json.loads(run("metrics csv", "diagnose", str(f), "--json").stdout)
    titles = [x["title"] for x in out["findings"]]
    assert out["files_read"] == 1 and any(t.startswith("2 malformed line") for t in titles), titles


NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},96000,786432,{g},{'A100' if g else ''}\n" for i, g in enumerate([8, 8, 0, 8, "x"]))


def test_node_list_cpu_only_and_bad_rows_are_counted(tmp_path: Path) -> None:
    f = tmp_path / "nodes.csv"
    f.write_text(NODES)
    args = ("sched", "simulate", "-t", str(REPO / "tests/fixtures/sched/small.swf"), "-f", "swf", "--node-list", str(f))
    r = run("node list", *args, "--json")
    c = json.loads(r.stdout)["cluster"]
    assert c["nodes"] + sum(c["skipped_rows"].values()) == 5, c  # every row: a node or counted
    assert c["skipped_rows"] == {"CPU-only (gpu=0)": 1, "bad number": 1}, c
    r = run("node list", *args)
    assert "3 nodes, 24 GPUs, 1 leaves (node list: 2 rows skipped: CPU-only (gpu=0) 1, bad number 1)" in r.stdout
    r = run("node list", "sched", "fill", "-t", str(REPO / "tests/fixtures/sched/pai2023_pods.csv"), "-f", "pai2023",
            "--node-list", str(f))
    assert r.code == 0 and "2 rows skipped" in r.stdout, r.stdout


@pytest.mark.parametrize("text,expect", [
    ("cases: []\n", "cases: holds no cases (the list is empty)"), ("", "holds no cases (the file is empty)"),
    ("[]\n", "holds no cases (the list is empty)"),
    ("casess:\n  - {id: a, kind: collective}\n", "holds no cases: unknown key 'casess'; did you mean 'cases'?"),
    ("foo: 1\n", "holds no cases: expected a list under 'cases:' or one case with 'kind:'")])
def test_validation_file_without_cases_is_exit_2(tmp_path: Path, text: str, expect: str) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(text)
    r = run("validation files", "validate", str(f))
    assert r.code == 2 and f"error: {f}: {expect}" in r.stderr, r.stderr


def test_validation_empty_directory_and_unknown_kind_are_exit_2(tmp_path: Path) -> None:
    r = run("validation files", "validate", str(tmp_path))
    assert r.code == 2 and f"{tmp_path}: directory holds no *.yaml case files" in r.stderr
    r = run("validation files", "validate", str(REPO / "validation/collective.yaml"), "--kind", "colective")
    assert r.code == 2 and "did you mean 'collective'?" in r.stderr
    r = run("validation files", "validate", str(REPO / "validation/collective.yaml"), "--kind", "hpl")
    assert r.code == 2 and "no case of that kind" in r.stderr and "skipped: collective" in r.stderr


def test_validation_skipped_cases_are_counted(tmp_path: Path) -> None:
    files = [str(REPO / "validation/collective.yaml"), str(REPO / "validation/reliability.yaml")]
    n_coll = len([c for c in json.loads(run("validation files", "validate", files[0], "--json").stdout)["cases"]])
    r = run("validation files", "validate", *files, "--kind", "reliability", "--json")
    s = json.loads(r.stdout)["summary"]
    assert s["skipped"] == n_coll and s["skipped_by_kind"] == {"collective": n_coll}, s
    r = run("validation files", "validate", *files, "--kind", "reliability")
    assert f"skipped {n_coll} case(s) of other kinds (--kind reliability): collective {n_coll}" in r.stdout


def test_validation_case_without_kind_names_the_typo(tmp_path: Path) -> None:
    f = tmp_path / "v.yaml"
    f.write_text("id: x\nkin: collective\nmeasured: {busbw_gb_per_s: 1}\n")
    out = json.loads(run("validation files", "validate", str(f), "--json").stdout)
    assert out["summary"]["failed"] == 1
    assert "missing 'kind:'" in out["cases"][0]["error"] and "unknown key 'kin', did you mean 'kind'?" in \
        out["cases"][0]["error"]


@seed(28)
@fuzz_settings(30)
@given(col=st.sampled_from([0, 1, 4, 5, 6, 7, 8]), text=st.sampled_from(HOSTILE_NUMBERS).filter(str.strip))
def test_nccl_tests_hostile_number_in_any_column(tmp_path_factory, col: int, text: str) -> None:
    """A hostile number in any column of one row: the row parses or is counted malformed; the fit never sees a
    non-finite value (no numpy warning), and rows + malformed is the data line count."""
    tok = ROW.split()
    tok[col] = text.replace(" ", "")
    r = _calibrate(tmp_path_factory.mktemp("n"), NCCL_LOG.replace(ROW, "  " + " ".join(tok)), "--json")
    assert "warning:" not in r.stderr, r.stderr
    if r.code == 0:
        lg = json.loads(r.stdout)["logs"][0]
        assert lg["rows"] + lg["malformed"] == 31 and sum(lg["malformed_by_cause"].values()) == lg["malformed"], lg
