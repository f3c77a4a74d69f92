"""Issue 28, errors: list-typed ``source:`` fields are handled (no internal error); semantic errors from HPC
workloads, torus dims and nccl-tests rank tables name the file; an exit-2 run prints its one error line and
nothing before it, naming the CLI option (``--max-replicas``) rather than the model field (``max_replicas``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.fuzz.harness import REPO, run, write_yaml

EXAMPLES = REPO / "examples" / "clusters"
FIXTURES = REPO / "tests" / "fixtures"
NCCL_LOG = FIXTURES / "nccl_tests" / "gcp_a3mega_2node_all_reduce_perf.log"
NCCL_CLUSTER = FIXTURES / "nccl_tests" / "gcp-a3mega-2vm.yaml"
DAMAGED_TRACE = FIXTURES / "infer" / "azure_damaged.csv"


def _only_error(r, starts: str) -> None:
    """Exit 2, stdout empty, stderr exactly one line, the error, starting with ``starts``."""
    assert r.code == 2, r.stdout[-300:]
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(starts), r.stderr


def _cluster(tmp_path: Path, source: object, name: str = "c.yaml") -> Path:
    data = yaml.safe_load((EXAMPLES / "ref-1k-h100.yaml").read_text(encoding="utf-8"))
    data["source"] = source
    return write_yaml(tmp_path / name, data)


COMMANDS = [("train", "estimate", "-m", "llama3-8b", "-b", "1024"), ("explain", "-m", "llama3-8b", "-b", "1024"),
            ("comm", "all_reduce"), ("hpc", "estimate", "hpl"), ("plan",)]


@pytest.mark.parametrize("source", [["datasheet", "paper"], [], ["one"]], ids=["two", "empty", "one"])
@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_list_source_is_accepted(tmp_path: Path, cmd: tuple[str, ...], source: list[str]) -> None:
    c = _cluster(tmp_path, source)
    args = (*cmd, str(c)) if cmd == ("plan",) else (*cmd, "-c", str(c))
    r = run("error lines", *args)
    assert r.code == 0, r.stderr


def test_list_source_in_a_model_and_in_plan_json(tmp_path: Path) -> None:
    m = write_yaml(tmp_path / "m.yaml", {"preset": "llama3-8b", "source": ["config.json", "paper"]})
    assert run("error lines", "train", "estimate", "-m", str(m), "-b", "1024").code == 0
    data = yaml.safe_load(_cluster(tmp_path, ["a", "b"]).read_text(encoding="utf-8"))
    data["node"] = {"preset": "dgx-h100", "source": ["vendor page", "price list"]}
    r = run("error lines", "plan", str(write_yaml(tmp_path / "n.yaml", data)), "--json")
    assert r.code == 0 and "dgx-h100: vendor page; price list" in r.stdout  # capex joins a list of sources


@pytest.mark.parametrize("source", [[1, 2], [{"a": 1}], [["nested"]], {"a": "b"}])
def test_malformed_source_is_one_line(tmp_path: Path, source: object) -> None:
    r = run("error lines", "explain", "-m", "llama3-8b", "-b", "1024", "-c", str(_cluster(tmp_path, source)))
    _only_error(r, f"error: {tmp_path / 'c.yaml'}: source")


WORKLOADS = [({"kind": "hpl", "gpus": 99999}, "gpus: gpus=99999 exceeds"),
             ({"kind": "hpl", "n": 99999999}, "n: N=99999999 needs"),
             ({"kind": "hpl", "p": 3, "q": 5000}, "p: P x Q exceeds"),
             ({"kind": "stencil", "grid": [10, 10, 10]}, "grid: 1024 GPUs cannot split"),
             ({"kind": "hpcg", "gpus": 5000}, "gpus: gpus=5000 exceeds")]


@pytest.mark.parametrize("workload,expect", WORKLOADS, ids=[e.split(":")[0] + str(w) for w, e in WORKLOADS])
def test_hpc_workload_errors_name_the_file(tmp_path: Path, workload: dict, expect: str) -> None:
    w = write_yaml(tmp_path / "w.yaml", workload)
    _only_error(run("error lines", "hpc", "estimate", str(w)), f"error: {w}: {expect}")


def test_hpc_gpus_option_is_named_as_the_option(tmp_path: Path) -> None:
    w = write_yaml(tmp_path / "w.yaml", {"kind": "hpl"})
    _only_error(run("error lines", "hpc", "estimate", str(w), "--gpus", "99999"), "error: --gpus: ")
    _only_error(run("error lines", "hpc", "estimate", "hpl", "--gpus", "99999"), "error: --gpus: ")


def test_torus_dims_error_names_the_cluster_file(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "tpu-style-torus-4k.yaml").read_text(encoding="utf-8"))
    data["network"]["torus_dims"] = [8, 8, 4]
    c = write_yaml(tmp_path / "torus.yaml", data)
    for args in (("plan", str(c)), ("explain", "-m", "llama3-8b", "-b", "1024", "-c", str(c))):
        _only_error(run("error lines", *args), f"error: {c}: network: torus_dims 8x8x4 = 256 nodes, but nodes = 512")
    data["network"]["torus_dims"] = [8, 8, 8]
    assert run("error lines", "plan", str(write_yaml(tmp_path / "ok.yaml", data))).code == 0


def _rank_table(tmp_path: Path, name: str, host: str) -> Path:
    """The 2-host fixture log with every rank moved onto host ``host`` (``{i}``: one host per rank)."""
    out = []
    for line in NCCL_LOG.read_text(encoding="utf-8").splitlines():
        if "# " in line and " Rank " in line and " on " in line:
            head, rest = line.split(" on ", 1)
            rank = head.split("Rank")[1].split()[0]
            line = f"{head} on {host.format(i=rank)} {rest.split(' ', 1)[1]}"
        out.append(line)
    p = tmp_path / name
    p.write_text("\n".join(out) + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize("host,expect", [("node-a", "16 ranks on 1 host(s) (16 per host)"),
                                         ("node-{i}", "16 ranks on 16 host(s) (1 per host)")])
def test_nccl_rank_table_errors_name_the_log(tmp_path: Path, host: str, expect: str) -> None:
    log = _rank_table(tmp_path, "all_reduce_perf.log", host)
    r = run("error lines", "calibrate", "--nccl-tests", str(log), "-c", str(NCCL_CLUSTER), "-o",
            str(tmp_path / "cal.yaml"))
    _only_error(r, f"error: {log}: the rank table puts {expect}")
    assert not (tmp_path / "cal.yaml").exists()


def test_nccl_rank_table_with_more_ranks_than_gpus_names_the_log(tmp_path: Path) -> None:
    log = _rank_table(tmp_path, "all_reduce_perf.log", "node-a")
    r = run("error lines", "calibrate", "--nccl-tests", str(log), "-c", "k80-8gpu-node", "-o",
            str(tmp_path / "cal.yaml"))
    _only_error(r, f"error: {log}: 16 ranks but the cluster has 4 GPUs")


SIMULATE = ("infer", "simulate", "--trace", str(DAMAGED_TRACE), "--model", "llama3-8b", "--no-windows")
INFER_OPTIONS = [(("--max-replicas", "0"), "error: --max-replicas: must be a whole number >= 1"),
                 (("--min-replicas", "5", "--max-replicas", "2"), "error: --min-replicas: --min-replicas exceeds "
                                                                   "--max-replicas"),
                 (("--router", "nope"), "error: --router: unknown router 'nope'"),
                 (("--prefill-replicas", "0"), "error: --prefill-replicas: "),
                 (("--tp", "3"), "error: --tp: "),
                 (("--window-s", "0.00001"), "error: --window-s: "),
                 (("--num-requests", "0"), "error: clustertwin infer simulate: --num-requests must be >= 1"),
                 (("--model", "nope"), "error: unknown model 'nope'")]


@pytest.mark.parametrize("extra,starts", INFER_OPTIONS, ids=[" ".join(e) for e, _ in INFER_OPTIONS])
def test_infer_simulate_error_comes_alone(extra: tuple[str, ...], starts: str) -> None:
    """The damaged trace's summary is not printed ahead of a later error; the option is named as typed."""
    _only_error(run("error lines", *SIMULATE, *extra), starts)


def test_infer_size_trace_error_comes_alone() -> None:
    base = ("infer", "size", "--trace", str(DAMAGED_TRACE), "--slo-ttft-ms", "500")
    _only_error(run("error lines", *base, "--attainment", "10"), "error: --attainment must be in")
    _only_error(run("error lines", *base, "--router", "nope"), "error: --router: unknown router")


def test_successful_runs_still_report_the_damaged_lines() -> None:
    r = run("error lines", *SIMULATE, "--tp", "1")
    assert r.code == 0 and "6 malformed" in r.stderr and "line 4: wrong field count" in r.stderr
    r = run("error lines", *SIMULATE, "--tp", "1", "--json")
    assert r.code == 0 and "6 malformed" in r.stderr


def test_synthetic_trace_fields_are_named_as_options() -> None:
    _only_error(run("error lines", "infer", "simulate", "--trace", "synthetic:nope"), "error: --trace: unknown")
    _only_error(run("error lines", "infer", "simulate", "--trace", "synthetic:bursty", "--burst-fraction", "2"),
                "error: --burst-fraction: ")


def test_deploy_warnings_do_not_precede_an_error() -> None:
    """A layout warning (zero=2 on Megatron, out of memory) is printed only when the job renders."""
    args = ("deploy", "slurm", "-m", "llama3-8b", "--gpus", "8", "--tp", "1", "--zero", "2", "-c", "a100-512-1gbe",
            "--global-batch", "8")
    _only_error(run("error lines", *args, "--ib-hca", "mlx5_0"), "error: --ib-hca: --ib-hca applies to RDMA")
    ok = run("error lines", *args)
    assert ok.code == 0 and "warning: zero=2 does not exist" in ok.stderr
