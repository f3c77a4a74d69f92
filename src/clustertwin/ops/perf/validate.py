"""``node validate``: the staged bring-up method, single GPU -> single node -> multi-node.

Stage 1 (one GPU): no critical/error finding on GPU 0; bf16 GEMM >= ``GEMM_PASS_FRACTION`` of the catalog
peak; device copy bandwidth >= ``HBM_PASS_FRACTION`` of catalog HBM bandwidth.
Stage 2 (one node): every GPU clean (and the expected count for ``--node``), topology and InfiniBand without
errors, NCCL all_reduce busbw at the largest size >= ``NCCL_PASS_FRACTION`` of the twin's expectation
(scale-up bandwidth x CommParams.nvlink_efficiency).
Stage 3 (multi-node) runs on the cluster: the stage prints the Slurm + torchrun command.
Stages after a failed or skipped one are not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from clustertwin import catalog
from clustertwin.comm.params import DEFAULT_PARAMS as COMM_DEFAULTS
from clustertwin.ops.health.check import CheckReport, check_node
from clustertwin.ops.perf import bench, bench_collectives
from clustertwin.units import MIB

GEMM_PASS_FRACTION = 0.6
"""Pass at 60% of dense peak: large cuBLAS GEMMs reach 75-85% (TrainParams.gemm_efficiency), the margin
covers power/thermal clocks; below it the GPU is throttled or faulty."""
HBM_PASS_FRACTION = 0.7
"""Pass at 70% of peak HBM bandwidth: device-to-device copies reach ~80-90% on healthy parts."""
NCCL_PASS_FRACTION = 0.85
"""Pass at 85% of the twin's expected single-node all_reduce busbw (Azure NHC's 8xH100 threshold,
460 GB/s, is ~96% of the measured 477 GB/s; this leaves room for the ring-vs-NVLS difference)."""
VALIDATE_NCCL_MAX_BYTES = 1024 * MIB
DEFAULT_NODES = 2
SLURM_TEMPLATE = """#!/bin/bash
#SBATCH --job-name=clustertwin-validate
#SBATCH --nodes={nodes} --ntasks-per-node=1 --gpus-per-node={gpus} --exclusive
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun torchrun --nnodes=$SLURM_NNODES --nproc_per_node={gpus} --rdzv_id=$SLURM_JOB_ID \\
     --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29500 \\
     -m clustertwin.ops.perf.dist_bench --op all_reduce -b 8M -e 8G -f 2"""

Status = Literal["pass", "fail", "skipped", "run-on-cluster"]


@dataclass
class Stage:
    name: str
    status: Status
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    """(check, passed, detail)."""
    reason: str = ""
    command: str | None = None


@dataclass
class ValidateReport:
    stages: list[Stage]
    check: CheckReport

    @property
    def passed(self) -> bool:
        return all(s.status in ("pass", "run-on-cluster") for s in self.stages)


def slurm_command(nodes: int, gpus_per_node: int) -> str:
    return SLURM_TEMPLATE.format(nodes=nodes, gpus=gpus_per_node)


def validate(node_id: str | None = None, nodes: int = DEFAULT_NODES) -> ValidateReport:
    rep = check_node(expect_node=node_id)
    gpus_per_node = len(rep.gpus) or (catalog.get("node", node_id).gpus if node_id else 0)
    stages: list[Stage] = []
    if not rep.gpus:
        reason = "no GPU on this node"
        stages = [Stage("single GPU", "skipped", reason=reason), Stage("single node", "skipped", reason=reason),
                  Stage("multi-node", "skipped", reason=reason + "; once stages 1-2 pass on a GPU node, run",
                        command=slurm_command(nodes, gpus_per_node) if gpus_per_node else None)]
        return ValidateReport(stages, rep)
    bad = {"critical", "error"}
    s1 = Stage("single GPU", "pass")
    gpu0 = [f for f in rep.findings if f.subject == "GPU 0" and f.severity in bad]
    s1.checks.append(("GPU 0 health", not gpu0, "; ".join(f.title for f in gpu0) or "no errors"))
    gemm, _ = bench.gemm(["bf16"])
    for g in gemm:
        ok = g.pct_of_peak is None or g.pct_of_peak >= 100 * GEMM_PASS_FRACTION
        s1.checks.append((f"GEMM {g.precision}", ok, f"{g.tflops:.0f} TFLOP/s = "
                          f"{g.pct_of_peak or 0:.0f}% of peak (pass >= {100 * GEMM_PASS_FRACTION:.0f}%)"))
    mem, _ = bench.device_memory_bandwidth()
    if mem is not None:
        ok = mem.pct_of_peak is None or mem.pct_of_peak >= 100 * HBM_PASS_FRACTION
        s1.checks.append(("device memory", ok, f"{mem.gb_per_s:.0f} GB/s = {mem.pct_of_peak or 0:.0f}% of peak"))
    s1.status = "pass" if all(c[1] for c in s1.checks) else "fail"
    stages.append(s1)
    s2 = Stage("single node", "skipped", reason="stage 1 failed")
    if s1.status == "pass":
        node_bad = [f for f in rep.findings if f.severity in bad]
        s2.checks.append(("node health", not node_bad, "; ".join(f.title for f in node_bad) or "no errors"))
        if len(rep.gpus) >= 2:
            res, skipped = bench_collectives.collectives(["all_reduce"], bench_collectives.sweep_sizes(8 * MIB, VALIDATE_NCCL_MAX_BYTES))
            gid = rep.gpu_catalog_ids[0]
            for c in res:
                busbw = c.rows[-1].busbw_gb_per_s
                expect = (catalog.get("gpu", gid).scale_up_gb_per_s * COMM_DEFAULTS.nvlink_efficiency
                          if gid else 0.0)
                ok = (expect == 0.0 or busbw >= NCCL_PASS_FRACTION * expect) and all(r.wrong == 0 for r in c.rows)
                s2.checks.append(("NCCL all_reduce", ok, f"busbw {busbw:.0f} GB/s, expected {expect:.0f} "
                                  f"(pass >= {NCCL_PASS_FRACTION * expect:.0f})"))
            s2.checks += [(s, False, "skipped") for s in skipped]
        s2.status = "pass" if all(c[1] for c in s2.checks) else "fail"
    stages.append(s2)
    s3 = Stage("multi-node", "skipped", reason="stage 2 did not pass")
    if s2.status == "pass":
        s3 = Stage("multi-node", "run-on-cluster", reason="run this on the cluster and compare busbw with "
                   "'clustertwin comm all_reduce --gpus N'", command=slurm_command(nodes, gpus_per_node))
    stages.append(s3)
    return ValidateReport(stages, rep)
