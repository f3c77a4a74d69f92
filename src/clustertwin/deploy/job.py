"""What a deployment needs beyond the specs: the job options, the twin's prediction for the header, and
the job plan (hosts, processes per host, layout) that the Slurm and Kubernetes renderers share.

Everything here is a pure function of typed specs. User strings are validated or sanitised here once;
the renderers quote them again for their target (``shlex.quote`` for shell, ``yaml.safe_dump`` for YAML).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from clustertwin.deploy import grammars
from clustertwin.deploy.prediction import (  # noqa: F401 (re-exported)
    CHINCHILLA_TOKENS_PER_PARAM,
    Prediction,
    layout_from_search,
    predict,
)
from clustertwin.errors import SpecError
from clustertwin.safety import comment_safe
from clustertwin.specs.base import PositiveInt, Spec
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.units import DAY_S, HOUR_S, MINUTE_S

MAX_GPUS_PER_HOST = 8
"""GPUs one server (one OS image, one Slurm node) holds in the catalog's designs. Nodes with more GPUs are
rack-scale NVLink domains (GB200 NVL72: 18 compute trays of 4 GPUs) and need ``gpus_per_host``."""
DEFAULT_RDZV_PORT = 29500
"""torchrun's conventional c10d rendezvous port."""
DEFAULT_PREEMPT_LEAD_S = 300
"""Seconds before the time limit (or preemption) at which Slurm signals the job to checkpoint."""
DEFAULT_SWITCH_WAIT = "00:10:00"
"""How long a job may wait for an allocation within the fewest leaf switches (``--switches=N@wait``) before
Slurm places it anywhere; Slurm caps it at SchedulerParameters=max_switch_wait (default 300 s)."""
DEFAULT_PREEMPT_GRACE_S = 240
"""Seconds the training processes get to checkpoint after the signal before the job step is terminated."""
K8S_NAME_MAX = 40
"""Longest Kubernetes object name we emit: JobSet pod hostnames are ``<name>-<rjob>-<i>-<j>``, which must
fit a 63-character DNS label."""
SLURM_JOB_NAME_MAX = 64
"""Longest Slurm job name we emit (longer names are legal but truncated by squeue's default columns)."""

GRAMMARS: dict[str, Callable[[str], str]] = {
    "topology_label": grammars.label_key, "rdma_resource": grammars.extended_resource,
    "image": grammars.image_reference, "container_image": grammars.pyxis_image, "ib_hca": grammars.ib_hca,
    "socket_ifname": grammars.socket_ifname}
"""Field -> the grammar its value must match (each returns the value or raises ValueError)."""

LayoutFlags = Literal["megatron", "nemo", "torchtitan", "none"]
Device = Literal["gpu", "cpu"]

_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*$")
_SLURM_TIME = re.compile(r"^(\d+-\d{1,2}(:\d{2}){0,2}|\d+(:\d{2}){0,2})$")
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./%-]+$")
_MOUNTS = re.compile(r"[A-Za-z0-9_./-]+:[A-Za-z0-9_./-]+(:ro|:rw)?(,[A-Za-z0-9_./-]+:[A-Za-z0-9_./-]+(:ro|:rw)?)*")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
def slurm_time_s(text: str) -> int:
    """Seconds of a Slurm time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(x) for x in text.split(":")] + [0] * (3 - len(text.split(":")))
        h, m, sec = parts
    else:
        nums = [int(x) for x in text.split(":")]
        h, m, sec = {1: (0, nums[0], 0), 2: (0, *nums), 3: tuple(nums)}[len(nums)]  # type: ignore[assignment]
    return int(days * DAY_S + h * HOUR_S + m * MINUTE_S + sec)


def slurm_job_name(name: str) -> str:
    """A job name safe inside an ``#SBATCH`` directive: letters, digits, ``_ . -`` (others become ``-``)."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:SLURM_JOB_NAME_MAX]
    return out or "train"


def k8s_name(name: str) -> str:
    """A DNS-1123 label from ``name`` (lower-case, ``a-z0-9-``, at most :data:`K8S_NAME_MAX` characters)."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:K8S_NAME_MAX].strip("-")
    return out or "train"


class DeploySpec(Spec):
    """How to run the training job: launcher script, names, limits, paths, fabric details the catalog
    does not know (HCA names, interface names), and Kubernetes placement."""

    script: str = "train.py"
    """Training script that torchrun starts on every GPU (relative to the submit/working directory)."""
    script_args: tuple[str, ...] = ()
    """Extra arguments after the layout flags, passed through verbatim."""
    job_name: str = "clustertwin-train"
    """Job name (sanitised for #SBATCH and Kubernetes names; kept verbatim in a Kubernetes annotation)."""
    flags: LayoutFlags = "megatron"
    """Layout and architecture flags to pass the script: Megatron-LM, NeMo/Megatron-Bridge, torchtitan, or none."""
    strict: bool = False
    """Refuse instead of warn: a ZeRO stage the framework lacks, checkpoints without a persistent volume."""
    container_image: str | None = None
    """Slurm: run the job step in this image with pyxis/enroot (``srun --container-image``)."""
    container_mounts: str | None = None
    """Slurm: pyxis ``--container-mounts`` (SRC:DST[,SRC:DST...]); the working directory is always mounted."""
    switch_wait: str = DEFAULT_SWITCH_WAIT
    """Slurm: the longest wait for the fewest leaf switches (``--switches=N@wait``)."""
    cpu_bind: Literal["numa", "none"] = "none"
    """numa: each rank on the cores of its GPU's NUMA node (torchrun ``--numa-binding=node``, torch 2.8+);
    none: the kernel places the ranks. Either way the one torchrun task per host runs ``srun --cpu-bind=none``
    (Slurm's task binding would confine all ranks of the host to one task's mask)."""
    trainjob_runtime: str = "torch-distributed"
    """Kubeflow Trainer v2 ClusterTrainingRuntime that a TrainJob refers to."""
    cluster_queue: str | None = None
    """Kueue ClusterQueue: with ``queue``, also emit the LocalQueue that points at it."""
    device: Device = "gpu"
    """gpu (NCCL) or cpu (gloo; no GPUs requested, for tests and dry runs)."""
    cpu_procs_per_host: PositiveInt = 2
    """Processes per host of a cpu job."""
    nodes: PositiveInt | None = None
    """Hosts to use; default: the layout's GPUs / GPUs per host."""
    gpus_per_host: PositiveInt | None = None
    """GPUs per server; default: the node's GPUs (required for rack-scale nodes such as GB200 NVL72)."""
    time_limit: str = "24:00:00"
    """Slurm time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS."""
    partition: str | None = None
    """Slurm partition."""
    account: str | None = None
    """Slurm account."""
    qos: str | None = None
    """Slurm QOS."""
    output: str = "%x-%j.out"
    """Slurm output file pattern (its directory must exist at submission)."""
    checkpoint_dir: str = "checkpoints"
    """Checkpoint directory on the shared (parallel) file system; also the preemption flag's directory."""
    rdzv_port: Annotated[int, Field(ge=1024, le=65535)] = DEFAULT_RDZV_PORT
    """Rendezvous port on the head node."""
    preempt_lead_s: Annotated[int, Field(ge=10)] = DEFAULT_PREEMPT_LEAD_S
    """Signal the job this many seconds before its end to checkpoint and requeue."""
    preempt_grace_s: Annotated[int, Field(ge=1)] = DEFAULT_PREEMPT_GRACE_S
    """Seconds between the signal and terminating the job step, for the checkpoint to finish."""
    ib_hca: str | None = None
    """NCCL_IB_HCA value; default the node's compute NICs as ``=mlx5_0:1,...`` (check ``ibdev2netdev``)."""
    socket_ifname: str | None = None
    """NCCL_SOCKET_IFNAME value (bootstrap and, on plain Ethernet, data)."""
    gid_index: Annotated[int, Field(ge=0, le=255)] | None = None
    """NCCL_IB_GID_INDEX for RoCE (default 3: RoCEv2 over IPv4 on most hosts)."""
    traffic_class: Annotated[int, Field(ge=0, le=255)] | None = None
    """NCCL_IB_TC for RoCE (default 106: DSCP 26, ECN-capable, the lossless class of common PFC setups)."""
    image: str = "nvcr.io/nvidia/pytorch:25.01-py3"
    """Container image (Kubernetes)."""
    namespace: str = "default"
    """Kubernetes namespace."""
    queue: str | None = None
    """Kueue LocalQueue name (adds the kueue.x-k8s.io/queue-name label)."""
    topology_label: str | None = None
    """Node label naming a network block (e.g. one leaf switch group): pods prefer one such domain."""
    rdma_resource: str = "rdma/rdma_shared_device_a"
    """Extended resource that exposes /dev/infiniband to a pod (RDMA shared device plugin)."""
    rdma_per_pod: PositiveInt = 1
    """How many of ``rdma_resource`` each pod requests."""
    host_network: bool = True
    """Pods use the host network (RDMA without SR-IOV/Multus)."""
    checkpoint_pvc: str | None = None
    """PersistentVolumeClaim mounted at ``checkpoint_dir`` in the pods."""
    tokens: Annotated[float, Field(gt=0)] | None = None
    """Token budget of the time-to-train line; default 20 tokens per parameter."""

    @field_validator("partition", "account", "qos")
    @classmethod
    def _slurm_word(cls, v: str | None) -> str | None:
        if v is not None and not _SLURM_WORD.fullmatch(v):
            raise ValueError(f"{v!r} is not a Slurm name (letters, digits, '_.+-', comma-separated)")
        return v

    @field_validator("time_limit", "switch_wait")
    @classmethod
    def _time(cls, v: str) -> str:
        if not _SLURM_TIME.fullmatch(v):
            raise ValueError(f"{v!r} is not a Slurm time (MM, HH:MM:SS, D-HH:MM:SS)")
        return v

    @field_validator("output")
    @classmethod
    def _output(cls, v: str) -> str:
        if not _SAFE_PATH.fullmatch(v):
            raise ValueError(f"{v!r}: use letters, digits and '_./%-' in the output pattern")
        return v

    @field_validator("namespace", "checkpoint_pvc")
    @classmethod
    def _dns(cls, v: str | None) -> str | None:
        if v is not None and not (_DNS_LABEL.fullmatch(v) and len(v) <= 63):
            raise ValueError(f"{v!r} is not a Kubernetes name (lower-case letters, digits, '-')")
        return v

    @field_validator("queue", "cluster_queue", "trainjob_runtime")
    @classmethod
    def _queue(cls, v: str | None) -> str | None:
        if v is not None and not (_DNS_LABEL.fullmatch(v) and len(v) <= 63):
            raise ValueError(f"{v!r} is not a valid Kueue queue name (a label value)")
        return v

    @field_validator("topology_label", "rdma_resource", "image", "container_image", "ib_hca", "socket_ifname")
    @classmethod
    def _grammar(cls, v: str | None, info: ValidationInfo) -> str | None:
        """Label key, extended resource, image references, NCCL lists: their grammars (:mod:`.grammars`)."""
        return v if v is None else GRAMMARS[str(info.field_name)](v)

    @field_validator("container_mounts")
    @classmethod
    def _mounts(cls, v: str | None) -> str | None:
        if v is not None and not _MOUNTS.fullmatch(v):
            raise ValueError(f"{v!r}: expected SRC:DST[:ro][,SRC:DST...] with letters, digits and '_./-'")
        return v

    @field_validator("script", "checkpoint_dir")
    @classmethod
    def _nonempty(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.strip():
            raise ValueError("must not be empty")
        if v.startswith("-"):
            raise ValueError(f"{v!r} must not start with '-' (it would read as an option)")
        if "\x00" in v:
            raise ValueError("must not contain NUL")
        return v

    @field_validator("script_args")
    @classmethod
    def _args(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any("\x00" in a for a in v):
            raise ValueError("arguments must not contain NUL")
        return v

    @model_validator(mode="after")
    def _grace(self) -> DeploySpec:
        if self.preempt_grace_s >= self.preempt_lead_s:
            raise ValueError(f"preempt_grace_s={self.preempt_grace_s} must be below "
                             f"preempt_lead_s={self.preempt_lead_s}")
        if self.preempt_lead_s >= slurm_time_s(self.time_limit):
            raise ValueError(f"preempt_lead_s={self.preempt_lead_s} must be below the time limit "
                             f"{self.time_limit} (the checkpoint signal would come at the start)")
        return self


@dataclass(frozen=True)
class JobPlan:
    """Hosts and processes of one job, shared by the Slurm and Kubernetes renderers."""

    cluster: ClusterSpec
    model: ModelSpec
    parallelism: ParallelismSpec
    options: DeploySpec
    hosts: int
    procs_per_host: int
    gpus_per_host: int
    """GPUs requested per host (0 for a cpu job)."""
    cpus_per_host: int | None
    """CPU cores of one host, when the catalog knows the CPU."""
    prediction: Prediction | None = None
    layout_args: tuple[str, ...] = field(default=())
    """Layout flags for the training script (before ``script_args``)."""
    launcher_env: tuple[tuple[str, str, str], ...] = field(default=())
    """(name, value, why) of variables the layout flags need (CUDA_DEVICE_MAX_CONNECTIONS ...)."""
    warnings: tuple[str, ...] = field(default=())
    """What the job does differently from the layout asked for (a ZeRO stage the framework lacks ...)."""

    @property
    def world_size(self) -> int:
        return self.hosts * self.procs_per_host

    @property
    def cluster_name(self) -> str:
        return comment_safe(self.cluster.name or self.cluster.id or "cluster")

    @property
    def model_name(self) -> str:
        return comment_safe(self.model.name or self.model.id or "model")

    def layout_line(self) -> str:
        p = self.parallelism
        return (f"tp={p.tp} pp={p.pp} dp={p.dp} cp={p.cp} ep={p.ep} vpp={p.vpp} micro_batch={p.micro_batch} "
                f"global_batch={p.global_batch} sequence_parallel={str(p.sequence_parallel).lower()} "
                f"recompute={p.recompute} zero={p.zero} precision={p.precision}" + self._stage_plan_text())

    def _stage_plan_text(self) -> str:
        """The stage-plan fields that are set (uneven pipelines), for the header line."""
        p = self.parallelism
        parts = [f"first_stage_layers={p.first_stage_layers}" if p.first_stage_layers else "",
                 f"last_stage_layers={p.last_stage_layers}" if p.last_stage_layers else "",
                 "embedding_in_split=true" if p.embedding_in_split else "",
                 "loss_in_split=true" if p.loss_in_split else "",
                 f"pipeline_layout={comment_safe(p.pipeline_layout)}" if p.pipeline_layout else ""]
        return "".join(f" {x}" for x in parts if x)

    def header_lines(self) -> list[str]:
        """Plain-text header: what, where, layout, prediction (every line free of control characters)."""
        o = self.options
        if o.device == "cpu":
            shape = f"{self.hosts} host(s) x {self.procs_per_host} CPU processes (gloo)"
        else:
            shape = f"{self.hosts} host(s) x {self.gpus_per_host} GPUs = {self.world_size} GPUs"
        lines = [
            f"model {self.model_name} on cluster {self.cluster_name}: {shape}",
            f"layout: {self.layout_line()}",
        ]
        lines += [f"warning: {w}" for w in self.warnings]
        if self.prediction is not None:
            lines += self.prediction.lines()
        return [comment_safe(x) for x in lines]


def _gpus_per_host(cluster: ClusterSpec, options: DeploySpec) -> int:
    node = cluster.node
    if options.gpus_per_host is not None:
        g = options.gpus_per_host
        if node.gpus % g:
            raise SpecError(f"gpus_per_host={g} does not divide the node's {node.gpus} GPUs",
                            path=("gpus_per_host",))
        return g
    if node.gpus > MAX_GPUS_PER_HOST:
        raise SpecError(f"node '{node.id or node.name}' has {node.gpus} GPUs in one scale-up domain spread over "
                        f"several servers; give gpus_per_host (GB200 NVL72 compute trays hold 4)",
                        path=("gpus_per_host",))
    return node.gpus


def plan_job(cluster: ClusterSpec, model: ModelSpec, parallelism: ParallelismSpec, options: DeploySpec,
             prediction: Prediction | None = None) -> JobPlan:
    """Hosts, processes per host and layout flags of ``parallelism`` on ``cluster``: the layout the framework
    runs (:func:`framework_layout`), which ``prediction``, when given, must have been made for."""
    from clustertwin.deploy.layout_flags import framework_layout, layout_args

    p, warnings = framework_layout(options.flags, parallelism, options.strict)
    if prediction is not None and prediction.parallelism is not None and prediction.parallelism != p:
        raise SpecError("the prediction was made for a different layout than the job runs "
                        f"({prediction.parallelism.zero=} vs {p.zero=}); predict the framework's layout")
    gph = _gpus_per_host(cluster, options)
    cluster_hosts = cluster.nodes * (cluster.node.gpus // gph)
    if options.device == "cpu":
        procs = options.cpu_procs_per_host
        hosts = options.nodes or max(1, -(-p.gpus // procs))
        if hosts * procs != p.gpus:
            raise SpecError(f"layout needs tp x pp x dp x cp = {p.gpus} processes; {hosts} host(s) x {procs} "
                            f"processes = {hosts * procs}", path=("parallelism",))
        gpus = 0
        cores: int | None = procs  # one core per gloo process
    else:
        if p.gpus < gph:
            hosts, procs = 1, p.gpus
        else:
            if p.gpus % gph:
                raise SpecError(f"layout needs {p.gpus} GPUs, not a multiple of {gph} GPUs per host",
                                path=("parallelism",))
            hosts, procs = p.gpus // gph, gph
        if options.nodes is not None and options.nodes != hosts:
            raise SpecError(f"nodes={options.nodes} but the layout's {p.gpus} GPUs need {hosts} host(s) of "
                            f"{gph} GPUs", path=("nodes",))
        gpus = procs
        node = cluster.node
        cores = node.cpu.cores * node.cpus if node.cpu is not None and node.cpus else None
        if cores is not None and gph != node.gpus:
            cores = cores * gph // node.gpus
    if hosts > cluster_hosts:
        raise SpecError(f"the job needs {hosts} hosts; cluster '{cluster.name or cluster.id}' has {cluster_hosts}",
                        path=("nodes",))
    args, env = layout_args(options.flags, model, p, options.checkpoint_dir)
    return JobPlan(cluster=cluster, model=model, parallelism=p, options=options, hosts=hosts,
                   procs_per_host=procs, gpus_per_host=gpus, cpus_per_host=cores, prediction=prediction,
                   layout_args=tuple(args), launcher_env=tuple(env), warnings=tuple(warnings))
