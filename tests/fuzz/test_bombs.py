"""Work caps on every expansion (issue 28): layout-string bombs, huge placement ranges and synthetic job counts
are refused from their counts, before anything is expanded or allocated: exit 2 with one ``error:`` line
naming the option (or file and field), in < 1 s CPU and < 200 MB traced memory."""

from __future__ import annotations

import io
import time
import tracemalloc
from pathlib import Path

import pytest
from rich.console import Console

from clustertwin.errors import SpecError
from tests.conftest import CliResult
from tests.fuzz.harness import REPO, run, write_yaml

CPU_LIMIT_S = 1.0
PEAK_LIMIT_B = 200 * 2**20
TRAIN = ("train", "estimate", "-c", "llama3-16k-h100-roce", "-m", "llama3-405b", "-b", "2048", "--tp", "8",
         "--pp", "16", "--dp", "128")
DEPLOY = ("deploy", "slurm", "--model", "llama3-405b", "--global-batch", "2048", "--cluster", "llama3-16k-h100-roce",
          "--tp", "8", "--pp", "16", "--dp", "128")
COMM = ("comm", "all_reduce", "-c", "llama3-16k-h100-roce", "-b", "1M", "-e", "1M")
LAYOUT_BOMBS = {
    "100M repeats": "(t|)*100000000",
    "nested 10^7": "((t|)*1000)*10000",
    "10^20 repeat": "Et*100000000000000000000L",
    "5000-digit repeat": "t*" + "9" * 5000,
    "nested 10^6^8": "(" * 8 + "t|" + ")*1000000" * 8,
    "deep nesting": "(" * 5000 + "t" + ")" * 5000,
    "long string": "t" * 200_000,
}
PLACEMENT_BOMBS = {
    "11-digit range": "0-99999999999",
    "30-digit end": "0-" + "9" * 30,
    "5000-digit end": "0-" + "9" * 5000,
    "repeated whole cluster": ",".join(["0-2047"] * 2000),
}


def bounded_run(surface: str, *args: str) -> tuple[CliResult, float, int]:
    """``run`` with the CPU seconds and the traced peak bytes of the call."""
    tracemalloc.start()
    cpu = time.process_time()
    try:
        r = run(surface, *args)
    finally:
        cpu = time.process_time() - cpu
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return r, cpu, peak


def assert_refused(r: CliResult, cpu: float, peak: int, *names: str) -> None:
    assert r.code == 2, r.stderr
    assert any(n in r.stderr for n in names), r.stderr
    assert cpu < CPU_LIMIT_S, f"refusal took {cpu:.2f} s CPU"
    assert peak < PEAK_LIMIT_B, f"refusal traced {peak / 2**20:.0f} MB"


@pytest.fixture(scope="module")
def warm() -> None:
    """Imports and catalog loads done once, outside the measured calls."""
    run("layout bombs", *TRAIN, "--pipeline-layout", "Et*7|L")
    run("layout bombs", *DEPLOY, "--pipeline-layout", "Et*7|L")
    run("placement bombs", *COMM, "--placement", "0-7,0-7")


# --- layout strings: counted from the grammar, never expanded before the check ------------------------------
@pytest.mark.parametrize("name", sorted(LAYOUT_BOMBS))
@pytest.mark.parametrize("surface", ["train", "deploy", "deploy --no-predict"])
def test_layout_bombs_are_refused_from_their_counts(warm, surface: str, name: str) -> None:
    base = TRAIN if surface == "train" else (*DEPLOY, *(["--no-predict"] if "no-predict" in surface else []))
    r, cpu, peak = bounded_run("layout bombs", *base, "--pipeline-layout", LAYOUT_BOMBS[name])
    assert_refused(r, cpu, peak, "--pipeline-layout")
    assert "pipeline layout" in r.stderr


def test_layout_counts_come_from_the_grammar() -> None:
    from clustertwin.train.layout_string import MAX_LAYOUT_ITEMS, layout_counts, parse_pipeline_layout

    cpu = time.process_time()
    c = layout_counts("((t|)*1000)*10000")  # 2 * 10^7 items, never listed
    assert (c.bars, c.layers, c.chunks, c.items) == (10**7, 10**7, 10**7, 2 * 10**7)
    deep = layout_counts("(" * 8 + "t|" + ")*1000000" * 8)
    assert deep.layers == 10**48 and deep.chunks == 10**48
    assert time.process_time() - cpu < 0.1
    assert layout_counts("Et*3|(tt|)*29m|L").chunks == 32 and layout_counts("").chunks == 1
    # the published layouts still parse, stage by stage
    assert parse_pipeline_layout("Et*7|(t*8|)*14t*7L", 16, 1, 126).stage_layers == (7, *[8] * 14, 7)
    assert parse_pipeline_layout("Et*3|(tt|)*29m|L", 16, 2, 62).stage_layers[:2] == (5, 4)
    for text, msg in (("t*100000000000000000000", "above the cap"), (f"(t|)*{MAX_LAYOUT_ITEMS + 1}", "above the cap"),
                      ("((t|)*1000)*10000", "10,000,000 chunks"), ("(" * 40 + ")" * 40, "deeper than"),
                      ("(t", "missing"), ("t)", "unmatched"), ("t*", "expected a count")):
        with pytest.raises(SpecError, match=msg):
            parse_pipeline_layout(text, 16, 1, 126)


def test_deploy_checks_a_layout_string_even_without_a_prediction(warm) -> None:
    r = run("layout bombs", *DEPLOY, "--pipeline-layout", "Et*7|L", "--no-predict")
    assert r.code == 2 and "--pipeline-layout" in r.stderr and "2 chunks" in r.stderr


# --- placement ranges: checked against the cluster before any index is listed --------------------------------
@pytest.mark.parametrize("name", sorted(PLACEMENT_BOMBS))
@pytest.mark.parametrize("surface", ["train", "comm", "comm nodes:"])
def test_placement_bombs_are_refused_before_listing(warm, surface: str, name: str) -> None:
    value = PLACEMENT_BOMBS[name]
    if surface == "train":
        args = (*TRAIN, "--placement", value)
    else:
        args = (*COMM, "--placement", ("nodes:" if surface == "comm nodes:" else "") + value)
    r, cpu, peak = bounded_run("placement bombs", *args)
    assert_refused(r, cpu, peak, "--placement")


def test_train_placement_is_checked_against_the_cluster() -> None:
    from clustertwin.train.topology_comm import MAX_PLACEMENT_NODES, parse_placement

    assert parse_placement("0-3,9", 16) == [0, 1, 2, 3, 9] and parse_placement("scattered", 16) == "scattered"
    for text, msg in (("0-16", "outside the cluster's nodes 0..15"), ("0-15,0", "more than 16 nodes"),
                      ("5-3", "ends before"), ("0-" + "9" * 30, "beyond the cluster"), ("-1", "cannot read"),
                      ("0x10", "cannot read")):
        with pytest.raises(SpecError, match=msg):
            parse_placement(text, 16)
    with pytest.raises(SpecError, match="beyond the cluster"):
        parse_placement(f"0-{MAX_PLACEMENT_NODES * 10}")


# --- synthetic traces: a documented cap that fits in memory, shown with progress ------------------------------
def _synthetic(tmp_path: Path, jobs: int) -> Path:
    return write_yaml(tmp_path / "syn.yaml", {"jobs": jobs, "target_load": 1.0, "seed": 1})


@pytest.mark.parametrize("jobs", [10_000_000, 1_000_001, 10**20])
def test_synthetic_job_count_above_the_cap_is_refused(warm, tmp_path: Path, jobs: int) -> None:
    trace = _synthetic(tmp_path, jobs)
    r, cpu, peak = bounded_run("synthetic bombs", "sched", "simulate", "-t", str(trace), "-f", "synthetic")
    assert r.code == 2 and str(trace) in r.stderr, r.stderr
    if jobs < 2**63:
        assert "jobs: synthetic trace asks for" in r.stderr and "cap of 1,000,000" in r.stderr
    assert_refused(r, cpu, peak, "jobs")
    # --max-jobs above the cap does not lift it; at most the cap, it generates only what is replayed
    r = run("synthetic bombs", "sched", "simulate", "-t", str(trace), "-f", "synthetic", "--max-jobs", str(jobs))
    assert r.code == 2
    if jobs < 2**63:
        r = run("synthetic bombs", "sched", "simulate", "-t", str(trace), "-f", "synthetic", "--max-jobs", "300",
                "-p", "fifo", "--json")
        assert r.code == 0 and '"jobs": 300' in r.stdout


def test_synthetic_cap_is_documented() -> None:
    from clustertwin.sched import synthetic

    assert synthetic.MAX_SYNTHETIC_JOBS == 1_000_000
    assert "10^6" in synthetic.__doc__ and "MAX_SYNTHETIC_JOBS" in synthetic.__doc__
    assert "above 1M jobs" in (REPO / "docs" / "sched.md").read_text(encoding="utf-8")


def test_generate_reports_progress_and_keeps_the_seeded_trace(tmp_path: Path) -> None:
    from clustertwin.sched.synthetic import GENERATE_STEPS, SyntheticSpec, generate

    steps: list[int] = []
    spec = SyntheticSpec(jobs=500, seed=3, teams=3)
    a = generate(spec, 512, progress=steps.append)
    b = generate(spec, 512)
    assert steps == list(range(1, GENERATE_STEPS + 1))
    assert a.ids == b.ids and a.users == b.users and (a.user == b.user).all() and (a.submit_s == b.submit_s).all()
    assert a.ids[0].startswith("syn-") and all("/" in u for u in a.users)
    with pytest.raises(SpecError, match="cap of 100") as err:
        generate(SyntheticSpec(jobs=101), 512, max_jobs=100)
    assert err.value.path == ("jobs",)


def test_progress_bar_on_stderr_after_the_delay(monkeypatch, tmp_path: Path) -> None:
    from clustertwin.cli import common, progress

    term = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=term, force_terminal=True, width=100))
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    r = run("synthetic bombs", "sched", "simulate", "-t", str(_synthetic(tmp_path, 3000)), "-f", "synthetic",
            "-p", "fifo", "--json")
    assert r.code == 0 and r.stdout.lstrip().startswith("{")
    shown = term.getvalue()
    assert "generating synthetic jobs" in shown and "fifo / first-fit" in shown
    quiet = io.StringIO()
    bar = progress.LazyProgress(Console(file=quiet, force_terminal=True), delay_s=60.0)
    with bar:
        update = bar.task("quick", 10)
        assert update is not None
        update(10)
    assert not bar.started and quiet.getvalue() == ""  # work under the delay prints nothing
    assert progress.LazyProgress(Console(file=io.StringIO())).task("x", 1) is None  # not a terminal
