"""Every int/float option of the CLI's fast commands, fed hostile number texts (NaN, inf, negatives, int64
overflow, 400 digits, malformed): exit 0 or 2 with one line, never a traceback, a hang or a usage box."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, seed
from hypothesis import strategies as st

from tests.conftest import CliResult
from tests.fuzz.harness import REPO, check, fuzz_settings, numbers, run

SWF = "tests/fixtures/sched/small.swf"
DEPLOY = ("--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--global-batch", "128", "--no-predict")
#: command -> (base arguments that run, the numeric options to fuzz, examples)
COMMANDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], int]] = {
    # --strict-layout: one estimate per case (the search that completes a partial layout is train search's,
    # fuzzed below)
    "train estimate": (("--gpus", "8", "-b", "16", "--tp", "8", "--zero", "0", "--strict-layout"),
                       ("--gpus", "--global-batch", "--seq-len", "--tp", "--pp", "--dp", "--cp", "--ep", "--vpp",
                        "--micro-batch", "--zero", "--tokens", "--usd-per-gpu-hour", "--hot-spares", "--trials",
                        "--seed"), 260),
    "train search": (("--gpus", "8", "-b", "8", "--tp", "8"),  # a small search: ~20 ms per case
                     ("--gpus", "--global-batch", "--tp", "--pp", "--dp", "--cp", "--ep", "--vpp", "--micro-batch",
                      "--zero", "--top", "--tokens", "--usd-per-gpu-hour"), 60),
    "infer estimate": (("-m", "llama3-8b", "--gpus", "1"),
                       ("--gpus", "--tp", "--pp", "--input-len", "--output-len", "--batch", "--concurrency",
                        "--request-rate", "--num-requests", "--length-cv"), 150),
    "comm": (("all_reduce", "-b", "1M", "-e", "1M"), ("--gpus", "--ranks-per-node", "--step-factor", "--min-bytes",
                                                     "--max-bytes"), 150),
    "reliability": (("--days", "3", "--trials", "0"),
                    ("--gpus", "--days", "--tokens", "--tokens-per-s", "--window-days", "--checkpoint-gb",
                     "--hot-spares", "--trials", "--seed"), 120),
    "deploy slurm": (DEPLOY, ("--gpus", "--tp", "--pp", "--dp", "--cp", "--ep", "--vpp", "--micro-batch", "--zero",
                              "--global-batch", "--cpu-procs", "--gpus-per-host", "--gid-index", "--traffic-class",
                              "--preempt-lead-s", "--preempt-grace-s", "--tokens"), 120),
    "deploy k8s": (DEPLOY, ("--gpus", "--tp", "--pp", "--global-batch", "--gpus-per-host", "--preempt-grace-s",
                            "--tokens"), 60),
    "sched simulate": (("-t", SWF, "-f", "swf"), ("--backfill-window", "--nodes-per-leaf", "--seed", "--max-jobs"),
                       60),
}


def _with(base: tuple[str, ...], opt: str, value: str) -> tuple[str, ...]:
    args = list(base)
    if opt in args:
        args[args.index(opt) + 1] = value
        return tuple(args)
    return (*args, opt, value)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_numeric_options(command: str) -> None:
    base, options, n = COMMANDS[command]

    @seed(22)
    @fuzz_settings(n)
    @given(opt=st.sampled_from(options), value=numbers())
    def case(opt: str, value: str) -> None:
        run(f"cli {command}", *command.split(), *_with(base, opt, value))

    case()


@seed(22)
@fuzz_settings(80)
@given(words=st.lists(st.sampled_from(["--tp", "--pp", "--tpp", "-b", "--gpus", "8", "x", "--", "--json", "-", "=",
                                       "--tp=8", "--tp=", "--help=1", "--zero", "nan"]), max_size=6))
def test_layout_flag_soup_is_one_line(words: list[str]) -> None:
    """Option soup on train search/estimate: click's usage box never reaches the user (125 cases once)."""
    for cmd in (("train", "estimate"), ("train", "search")):
        if "--help" in words:
            continue
        run("cli usage", *cmd, *words)


@pytest.mark.parametrize("opt", ["--node-mtbf-h", "--node-mttr-h"])
def test_sched_failure_rates(opt: str) -> None:
    """Failure options on the PAI 2023 sample: the CLI guard rejects NaN/inf/negatives (first values); a tiny
    positive rate is bounded by the scheduler's failure-event and requeue caps (the last value: it must end,
    in a child process so a runaway simulation would be killed; 60 s leaves room for a loaded CI host)."""
    base = ("sched", "simulate", "-t", "examples/traces/alibaba-pai-2023/openb_pod_list_default.csv",
            "-f", "pai2023", "--node-list", "examples/traces/alibaba-pai-2023/openb_node_list_gpu_node.csv",
            "--max-jobs", "500")
    mtbf = () if opt == "--node-mtbf-h" else ("--node-mtbf-h", "100")
    for value in ("nan", "inf", "-1", "0", "1e308"):
        run("cli sched failures", *base, *mtbf, opt, value, timeout_s=20)
    args = [sys.executable, "-c", "import sys; from clustertwin.cli.main import main; sys.exit(main(sys.argv[1:]))",
            *base, *mtbf, opt, "1e-3"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    try:
        r = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{opt} 1e-3 ran past 60 s (no failure-event/requeue cap)")
    check(CliResult(r.returncode, r.stdout, r.stderr), tuple(args[3:]))
