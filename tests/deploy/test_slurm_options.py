"""Slurm script options from the topology and the site: --switches from the leaf switches the job spans,
pyxis/enroot container image (quoted; outside the image grammar refused), torchrun NUMA binding, and srun's task binding."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from clustertwin import specs
from clustertwin.deploy import DeploySpec, slurm_script
from clustertwin.errors import SpecError
from clustertwin.topology import build


def cluster() -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")


def model() -> specs.ModelSpec:
    return specs.load(specs.ModelSpec, "llama3-8b", kind="model")


def script(gpus: int, **opts) -> str:
    par = specs.ParallelismSpec(tp=8, dp=gpus // 8, global_batch=max(8, gpus // 8))
    return slurm_script(cluster(), model(), par, DeploySpec(**opts))


def test_switches_follow_the_leaf_switches_the_job_spans():
    topo = build(cluster())
    per_leaf = topo.nodes_per_leaf
    assert "#SBATCH --switches=1@00:10:00" in script(8 * per_leaf)
    two = script(8 * (per_leaf + 1), switch_wait="30:00")
    assert topo.span(per_leaf + 1).leaves == 2 and "#SBATCH --switches=2@30:00" in two
    assert "--switches" not in script(8)  # one host: no switch to ask for


@pytest.mark.parametrize("image", ["registry.example.com/team/pytorch:25.01-py3", "nvcr.io#nvidia/pytorch:25.01-py3",
                                   "/lustre/images/pytorch.sqsh"])
def test_container_image_is_quoted_for_srun(tmp_path, image):
    text = script(16, container_image=image, container_mounts="/lustre:/lustre:ro")
    line = next(ln for ln in text.splitlines() if ln.startswith("srun "))
    words = shlex.split(line.rstrip("\\"))
    assert f"--container-image={image}" in words
    assert "--container-mounts=$PWD:$PWD,/lustre:/lustre:ro" in words and "--cpu-bind=none" in words
    path = tmp_path / "job.sbatch"
    path.write_text(text, encoding="utf-8")
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_container_image_outside_the_reference_grammar_is_refused():
    with pytest.raises(SpecError, match="container_image"):
        specs.build(DeploySpec, {"container_image": "registry.example.com/team/pytorch:25.01-py3;touch PWNED"})


def test_numa_binding_only_for_gpu_jobs():
    assert re.search(r"^\s+--numa-binding=node \\$", script(16, cpu_bind="numa"), re.MULTILINE)
    assert "--numa-binding" not in script(16)
    cpu = slurm_script(cluster(), model(), specs.ParallelismSpec(dp=2, global_batch=2),
                       DeploySpec(device="cpu", cpu_bind="numa", flags="none"))
    assert "--numa-binding" not in cpu
