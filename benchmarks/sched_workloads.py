"""The scheduler benchmark suite's workloads (issue 31): not one trace but several, each a different load.

- ``pai2023``: the shipped Alibaba PAI 2023 pod list on its node list (6,203 replayable GPU pods; a light,
  GPU-sharing load with CPU and memory constraints).
- ``philly-like``: the synthetic generator with its Philly defaults (median runtime 874 s, mean 18,006 s,
  Acme ``cluster_summary.csv``) at offered load 0.9.
- ``helios-like``: the synthetic generator with the Helios summary (median runtime 206 s, mean 6,652 s,
  mean 3.7 GPUs per job; HeliosArtifact ``helios_cluster_summary.csv``, Hu et al., SC'21) at offered load 0.9.
- ``swf-heavy``: the heavy-tailed 90 %-load SWF mix: inter-arrival exponential with mean 11 s, GPUs drawn
  uniformly from {1, 1, 1, 2, 4, 8, 8, 16, 32, 64, 128}, runtime lognormal(mu = 7, sigma = 1.5) s (at least
  1 s), time limit 2x the runtime; written as Standard Workload Format (Feitelson's SWF 2.2, 18 fields).
  Offered load: E[gpus] = 273/11 = 24.8 GPUs x E[runtime] = exp(7 + 1.5^2/2) = 3,388 s per 11 s, over
  8,192 GPUs = 0.93.

Every workload runs on 1,024 nodes x 8 GPUs (the PAI trace on its own node list), generated from a fixed seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clustertwin.sched import cluster as C
from clustertwin.sched import readers, synthetic
from clustertwin.sched.jobs import JobTable

NODES = 1024
GPUS_PER_NODE = 8
SEED = 2024
SWF_GPU_CHOICES = (1, 1, 1, 2, 4, 8, 8, 16, 32, 64, 128)
SWF_MEAN_INTERARRIVAL_S = 11.0
SWF_RUNTIME_MU, SWF_RUNTIME_SIGMA = 7.0, 1.5
SWF_LIMIT_FACTOR = 2.0
HELIOS_MEDIAN_RUNTIME_S = 206.0
HELIOS_MEAN_RUNTIME_S = 6652.0
HELIOS_GPU_MIX = {1: 0.55, 2: 0.12, 4: 0.12, 8: 0.15, 16: 0.04, 32: 0.015, 64: 0.005}
"""Mean 3.7 GPUs per job, the Helios summary's mean (an assumed shape: the per-size histogram is not public)."""
PAI_DIR = Path(__file__).resolve().parents[1] / "examples" / "traces" / "alibaba-pai-2023"


def cluster() -> C.SchedCluster:
    return C.uniform(NODES, GPUS_PER_NODE)


def write_swf(path: Path, jobs: int, seed: int = SEED) -> Path:
    """The heavy-tailed SWF mix (module docstring) as an SWF 2.2 file of ``jobs`` lines."""
    rng = np.random.default_rng(seed)
    submit = np.rint(np.cumsum(rng.exponential(SWF_MEAN_INTERARRIVAL_S, size=jobs))).astype(np.int64)
    gpus = rng.choice(np.array(SWF_GPU_CHOICES), size=jobs)
    run = np.maximum(np.rint(rng.lognormal(SWF_RUNTIME_MU, SWF_RUNTIME_SIGMA, size=jobs)), 1).astype(np.int64)
    limit = (SWF_LIMIT_FACTOR * run).astype(np.int64)
    user = rng.integers(1, 201, size=jobs)
    # fields: id submit wait run alloc_procs cpu mem req_procs req_time req_mem status user group exe queue
    # partition preceding think
    lines = [f"{i + 1} {s} -1 {r} {g} -1 -1 {g} {lim} -1 1 {u} -1 -1 0 -1 -1 -1\n"
             for i, (s, r, g, lim, u) in enumerate(zip(submit.tolist(), run.tolist(), gpus.tolist(),
                                                       limit.tolist(), user.tolist(), strict=True))]
    with path.open("w") as f:
        f.write("; heavy-tailed 90%-load SWF mix (clustertwin benchmark)\n")
        f.writelines(lines)
    return path


def philly_like(jobs: int) -> JobTable:
    spec = synthetic.SyntheticSpec(jobs=jobs, target_load=0.9, seed=SEED)
    return synthetic.generate(spec, NODES * GPUS_PER_NODE, max_jobs=max(jobs, synthetic.MAX_SYNTHETIC_JOBS))


def helios_like(jobs: int) -> JobTable:
    spec = synthetic.SyntheticSpec(jobs=jobs, target_load=0.9, median_runtime_s=HELIOS_MEDIAN_RUNTIME_S,
                                   mean_runtime_s=HELIOS_MEAN_RUNTIME_S, gpu_mix=HELIOS_GPU_MIX, seed=SEED)
    return synthetic.generate(spec, NODES * GPUS_PER_NODE, max_jobs=max(jobs, synthetic.MAX_SYNTHETIC_JOBS))


def pai2023() -> tuple[C.SchedCluster, JobTable]:
    cl = C.from_node_list(PAI_DIR / "openb_node_list_gpu_node.csv")
    return cl, readers.read_trace(PAI_DIR / "openb_pod_list_default.csv", "pai2023").jobs
