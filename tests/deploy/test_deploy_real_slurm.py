"""A generated script on a real Slurm: one node on localhost (``ci/slurm-setup.sh``), CPU variant of the
sbatch script (gloo, 2 processes), a tiny data-parallel training loop written here, submitted with
``sbatch``; checks its output, the all-reduce result, the checkpoint-on-preempt requeue and the job's
``sacct --completion --parsable2`` record.

Outside CI the tests skip when no Slurm controller answers; with ``CI`` set they fail instead."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustertwin import specs
from clustertwin.deploy import DeploySpec, slurm_script
from clustertwin.specs import ParallelismSpec

SUBMIT_TIMEOUT_S = 240
SACCT_FIELDS = ("JobID,JobName,User,Submit,Start,End,Timelimit,NNodes,AllocTRES,State,ExitCode,Partition,NodeList,"
                "Elapsed,NCPUS")
"""Columns for the checks here and for the scheduler simulator's reader (JobID, Submit, Start, End, Timelimit,
NNodes, AllocTRES)."""

TRAIN = r'''
"""Tiny data-parallel regression over gloo: all-reduced gradients, a checkpoint, and preemption by flag."""
import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--sleep", type=float, default=0.0)
ap.add_argument("--tag", default="")
args = ap.parse_args()


def teardown():
    """Clean process-group teardown: wait for every rank, drop every object that holds the gloo process group
    (tensors and work handles of the last collectives), then destroy it while Python still runs. A group
    destroyed later, by the interpreter's exit, can abort in gloo's thread teardown ("terminate called without
    an active exception", exit -6) after the job's work is done: torchrun, srun and sbatch --wait then report
    a finished job as failed."""
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
    gc.collect()


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ckpt_dir = os.environ["CHECKPOINT_DIR"]
ckpt = os.path.join(ckpt_dir, "state.pt")
flag = os.environ["CLUSTERTWIN_PREEMPT_FLAG"]

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
    print(f"rank {rank}: resumed from step {start}", flush=True)
x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
xs, ys = x[rank::world], y[rank::world]

step = start
while step < args.steps:
    loss = ((model(xs) - ys) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    step += 1
    if rank == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    stop = torch.tensor([1.0 if os.path.exists(flag) else 0.0])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop.item() > 0 and step < args.steps:
        if rank == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt)
            print(f"preempted: checkpoint at step {step}", flush=True)
        del stop
        teardown()
        raise SystemExit(0)
    time.sleep(args.sleep)

total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(weights) for _ in range(world)]
dist.all_gather(gathered, weights)
same = all(torch.equal(g, weights) for g in gathered)
print(f"rank {rank}/{world}: all_reduce(rank+1)={total.item():g} replicas_equal={same} tag={args.tag!r}",
      flush=True)
if rank == 0:
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt)
    with open(os.path.join(ckpt_dir, "done.json"), "w") as f:
        json.dump({"world": world, "steps": step, "all_reduce": total.item()}, f)
del total, weights, gathered
teardown()
'''


def _slurm_ready() -> str | None:
    """None when a controller answers and torch (torchrun, gloo) is importable, else why not."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e '.[bench]')"
    for tool in ("sbatch", "sacct", "scontrol", "squeue"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (run ci/slurm-setup.sh as root)"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    if "UP" not in ping.stdout:
        return "slurmctld does not answer 'scontrol ping' (run ci/slurm-setup.sh as root)"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    why = _slurm_ready()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the real-Slurm tests: {why}")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    # the job inherits the submitter's environment (sbatch --export=ALL): torchrun from this interpreter
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


def _script(tmp: Path, name: str, script_args: tuple[str, ...]) -> Path:
    (tmp / "train_tiny.py").write_text(TRAIN, encoding="utf-8")
    opts = DeploySpec(script="train_tiny.py", script_args=script_args, job_name=name, flags="none",
                      device="cpu", cpu_procs_per_host=2, time_limit="00:10:00", checkpoint_dir="ckpt run",
                      rdzv_port=_free_port(), preempt_lead_s=60, preempt_grace_s=30)
    par = ParallelismSpec(dp=2, global_batch=2)
    cluster = specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")
    model = specs.load(specs.ModelSpec, "llama3-8b", kind="model")
    text = slurm_script(cluster, model, par, opts)
    path = tmp / f"{name}.sbatch"
    path.write_text(text, encoding="utf-8")
    return path


def _sacct(job_id: str) -> list[dict[str, str]]:
    """Records of ``job_id`` from ``sacct --completion --parsable2`` (the job-completion file; no database)."""
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run(["sacct", "--completion", "--parsable2", "-j", job_id, f"--format={SACCT_FIELDS}"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        lines = [ln for ln in out.splitlines() if ln.strip()]
        header = lines[0].split("|")
        rows = [dict(zip(header, ln.split("|"), strict=True)) for ln in lines[1:]]
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(1)


CREDENTIAL_REVOKE_GAP_S = 3.0
"""Wait between a requeue and releasing the job (slurmd compares credential times in whole seconds)."""


def _release_when_pending(job_id: str, deadline: float) -> None:
    """Start the requeued job now instead of after Slurm's requeue delay."""
    while True:
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                               text=True, timeout=30).stdout.strip()
        if state == "PENDING":
            # slurmd revokes the first run's credential with one-second resolution: a restart inside the
            # same second is killed as "Job credential revoked", so let the clock move on first
            time.sleep(CREDENTIAL_REVOKE_GAP_S)
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True, timeout=30)
            return
        if state == "RUNNING":
            return
        assert time.monotonic() < deadline, f"job {job_id} stuck in state {state!r}"
        time.sleep(0.5)


def _read_with_sched(path: Path):
    """The scheduler simulator's sacct reader, when the sched layer has one (else None)."""
    try:
        from clustertwin.sched.readers import read_sacct
    except ImportError:
        return None
    return read_sacct(path)


@pytest.mark.slow
def test_real_slurm_job_runs_to_completion(slurm, tmp_path):
    script = _script(tmp_path, "ct-allreduce", ("--steps", "5", "--tag", "it's $(ok); fine"))
    sub = subprocess.run(["sbatch", "--parsable", "--wait", str(script)], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S)
    job_id = sub.stdout.strip().split(";")[0]
    log = tmp_path / f"ct-allreduce-{job_id}.out"
    text = log.read_text() if log.exists() else "(no output file)"
    print(text)
    assert sub.returncode == 0, f"sbatch --wait failed ({sub.returncode}): {sub.stderr}\n{text}"
    for rank in (0, 1):
        assert f"rank {rank}/2: all_reduce(rank+1)=3 replicas_equal=True tag=\"it's $(ok); fine\"" in text
    assert "step 5 loss" in text
    assert "SIGUSR1" not in text and "resumed" not in text  # ran once, start to end
    done = (tmp_path / "ckpt run" / "done.json").read_text()
    assert '"world": 2' in done and '"all_reduce": 3.0' in done
    rows = _sacct(job_id)
    print("sacct:", rows)
    assert rows, f"no sacct record for job {job_id}"
    rec = rows[-1]
    assert rec["JobID"] == job_id
    assert rec["JobName"] == "ct-allreduce"
    assert rec["State"] == "COMPLETED"
    assert rec["ExitCode"] == "0:0"
    assert rec["NNodes"] == "1"
    export = tmp_path / "sacct.txt"
    export.write_text("|".join(rec) + "\n" + "|".join(rec.values()) + "\n", encoding="utf-8")
    trace = _read_with_sched(export)
    if trace is not None:
        report = trace.report.to_dict()
        print("sched reader:", report)
        # the record parses (times in order, duration limit read); a CPU-only job is left out of GPU traces
        assert trace.report.lines == 1 and trace.report.malformed == 0
        assert trace.report.excluded.get("cpu-only") == 1 and trace.report.jobs == 0


@pytest.mark.slow
def test_real_slurm_preempt_checkpoints_and_requeues(slurm, tmp_path):
    script = _script(tmp_path, "ct-preempt", ("--steps", "40", "--sleep", "0.25"))
    sub = subprocess.run(["sbatch", "--parsable", str(script)], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=60, check=True)
    job_id = sub.stdout.strip().split(";")[0]
    log = tmp_path / f"ct-preempt-{job_id}.out"
    deadline = time.monotonic() + SUBMIT_TIMEOUT_S
    while not (log.exists() and "step 3 loss" in log.read_text()):
        assert time.monotonic() < deadline, "the job never reached step 3"
        time.sleep(0.5)
    # what Slurm sends near the time limit (--signal=B:USR1@lead), delivered now to the batch shell
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True, timeout=30)
    while "requeueing job" not in log.read_text():
        assert time.monotonic() < deadline, f"the job did not requeue itself:\n{log.read_text()}"
        time.sleep(0.5)
    # Slurm holds a requeued batch job back (begin time about two minutes ahead); release it now
    _release_when_pending(job_id, deadline)
    done = tmp_path / "ckpt run" / "done.json"
    while not done.exists():
        if time.monotonic() > deadline:
            state = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
            pytest.fail(f"requeued job did not finish:\n{log.read_text()}\n{state}")
        time.sleep(1)
    while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "job still in the queue"
        time.sleep(1)
    text = log.read_text()
    print(text)
    assert "clustertwin: SIGUSR1" in text and "requeueing job" in text
    assert "preempted: checkpoint at step" in text
    assert "rank 0: resumed from step" in text
    assert "all_reduce(rank+1)=3 replicas_equal=True" in text
    assert '"steps": 40' in done.read_text()
    states = [r["State"] for r in _sacct(job_id)]
    print("sacct states:", states)
    assert states[-1] == "COMPLETED"
    assert len(states) >= 2, "the requeued run should leave a second record"
