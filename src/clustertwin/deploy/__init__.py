"""Deployment: Slurm batch scripts and Kubernetes manifests (Kubeflow PyTorchJob, JobSet) for multi-node
torchrun jobs of a planned layout, with the NCCL environment of the cluster's fabric."""

from clustertwin.deploy.job import DeploySpec, JobPlan, Prediction, layout_from_search, plan_job, predict
from clustertwin.deploy.nccl_env import EnvVar, nccl_env
from clustertwin.deploy.slurm import render_sbatch, slurm_script

__all__ = [
    "DeploySpec",
    "EnvVar",
    "JobPlan",
    "Prediction",
    "layout_from_search",
    "nccl_env",
    "plan_job",
    "predict",
    "render_sbatch",
    "slurm_script",
]
