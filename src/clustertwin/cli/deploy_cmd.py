"""``clustertwin deploy slurm|k8s``: an sbatch script or Kubernetes manifests (PyTorchJob, JobSet) that run a
layout with torchrun, with the fabric's NCCL settings and the twin's prediction in a header comment.

The layout comes from ``--tp --pp --dp ...`` (dp defaults to the GPUs left over) or ``--from-search``
(the fastest fitting layout of ``train search``). Arguments after ``--`` go to the training script."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Annotated, Any

import typer

from clustertwin.cli.common import ClusterOpt, JsonOpt, load_cluster, load_model, print_json, require_gpus
from clustertwin.cli.option_errors import option_names
from clustertwin.deploy.job import DeploySpec, JobPlan, layout_from_search, plan_job, predict
from clustertwin.deploy.k8s import KINDS, NO_PVC_WARNING, render_manifests
from clustertwin.deploy.layout_flags import framework_layout
from clustertwin.deploy.slurm import render_sbatch
from clustertwin.errors import SpecError
from clustertwin.specs import ParallelismSpec, build
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.train.layout_string import parse_pipeline_layout

deploy_app = typer.Typer(help="Slurm batch scripts and Kubernetes manifests for a training layout.",
                         no_args_is_help=True)

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model catalog id or YAML/JSON file.")]
TpOpt = Annotated[int | None, typer.Option("--tp", help="Tensor-parallel degree.")]
PpOpt = Annotated[int | None, typer.Option("--pp", help="Pipeline-parallel stages.")]
DpOpt = Annotated[int | None, typer.Option("--dp", help="Data-parallel degree (default: GPUs / (tp pp cp)).")]
CpOpt = Annotated[int | None, typer.Option("--cp", help="Context-parallel degree.")]
EpOpt = Annotated[int | None, typer.Option("--ep", help="Expert-parallel degree.")]
VppOpt = Annotated[int | None, typer.Option("--vpp", help="Virtual pipeline chunks per stage.")]
FirstOpt = Annotated[int | None, typer.Option("--first-stage-layers", help="Layers on the first pipeline stage.")]
LastOpt = Annotated[int | None, typer.Option("--last-stage-layers", help="Layers on the last pipeline stage.")]
EmbOpt = Annotated[bool | None, typer.Option("--embedding-in-split", help="The embedding takes a layer slot.")]
LossOpt = Annotated[bool | None, typer.Option("--loss-in-split", help="Output layer and loss take a layer slot.")]
PlOpt = Annotated[str | None, typer.Option("--pipeline-layout",
                                           help="Megatron layout string, e.g. 'Et*7|(t*8|)*14t*7L'.")]
MbsOpt = Annotated[int | None, typer.Option("--micro-batch", help="Sequences per micro-batch.")]
GbsOpt = Annotated[int, typer.Option("--global-batch", help="Sequences per optimizer step.")]
RecomputeOpt = Annotated[str | None, typer.Option("--recompute", help="none, selective or full.")]
ZeroOpt = Annotated[int | None, typer.Option("--zero", help="ZeRO stage 0-3 (1 = distributed optimizer).")]
SpOpt = Annotated[bool | None, typer.Option("--sequence-parallel/--no-sequence-parallel",
                                            help="Megatron sequence parallelism (default: on when tp > 1).")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="bf16, fp16, fp8, fp32 or tf32.")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", "-n", help="GPUs of the job (default: the whole cluster).")]
SearchOpt = Annotated[bool, typer.Option("--from-search", help="Use the fastest fitting layout of train search.")]
ScriptOpt = Annotated[str, typer.Option("--script", help="Training script torchrun starts.")]
ArgsArg = Annotated[list[str] | None, typer.Argument(help="Arguments for the training script (after --).")]
NameOpt = Annotated[str, typer.Option("--job-name", help="Job name.")]
FlagsOpt = Annotated[str, typer.Option("--flags", help="Layout and architecture flags: megatron, nemo "
                                                      "(Megatron-Bridge overrides), torchtitan or none.")]
StrictOpt = Annotated[bool, typer.Option("--strict", help="Refuse (exit 2) instead of warning: a ZeRO stage the "
                                                         "framework lacks, checkpoints without a persistent volume.")]
CpuBindOpt = Annotated[str, typer.Option("--cpu-bind", help="numa: torchrun --numa-binding=node puts each rank on its GPU's NUMA node (torch >= 2.8); none.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="gpu (NCCL) or cpu (gloo, for tests).")]
CpuProcsOpt = Annotated[int, typer.Option("--cpu-procs", help="Processes per host of a --device cpu job.")]
GphOpt = Annotated[int | None, typer.Option("--gpus-per-host",
                                            help="GPUs per server (rack-scale nodes such as GB200 NVL72: 4).")]
CkptOpt = Annotated[str, typer.Option("--checkpoint-dir", help="Checkpoint directory on the shared file system.")]
HcaOpt = Annotated[str | None, typer.Option("--ib-hca", help="NCCL_IB_HCA (default: =mlx5_0:1,... per NIC).")]
IfOpt = Annotated[str | None, typer.Option("--socket-ifname", help="NCCL_SOCKET_IFNAME.")]
GidOpt = Annotated[int | None, typer.Option("--gid-index", help="NCCL_IB_GID_INDEX (RoCE; default 3).")]
TcOpt = Annotated[int | None, typer.Option("--traffic-class", help="NCCL_IB_TC (RoCE; default 106).")]
TokensOpt = Annotated[float | None, typer.Option("--tokens", help="Token budget for time-to-train "
                                                                  "(default 20 per parameter).")]
NoPredictOpt = Annotated[bool, typer.Option("--no-predict", help="Leave the twin's prediction out of the header.")]
OutOpt = Annotated[Path | None, typer.Option("--output", "-o", help="Write to FILE instead of stdout.")]

LAYOUT_FLAGS = ("tp", "pp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero", "sequence_parallel",
                "first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split", "pipeline_layout")
"""Options that are fields of the layout (ParallelismSpec); each command reads them from its arguments."""


def _layout(cluster: ClusterSpec, model: ModelSpec, given: dict[str, Any], *, dp: int | None, gpus: int | None,
            global_batch: int, precision: str, from_search: bool, flags: str) -> tuple[ParallelismSpec, str]:
    require_gpus(gpus)
    fixed = {k: v for k, v in given.items() if v is not None}
    if from_search:
        if dp is not None:
            fixed["dp"] = dp
        return layout_from_search(model, cluster, global_batch=global_batch, gpus=gpus, precision=precision,
                                  fixed=fixed, flags=flags)
    n = gpus or cluster.total_gpus
    if dp is None:
        group = fixed.get("tp", 1) * fixed.get("pp", 1) * fixed.get("cp", 1)
        if n % group:
            raise SpecError(f"{n} GPUs are not a multiple of tp x pp x cp = {group}; give --dp or --gpus")
        dp = n // group
    data = {**fixed, "dp": dp, "global_batch": global_batch, "precision": precision}
    if "sequence_parallel" not in fixed:
        data["sequence_parallel"] = fixed.get("tp", 1) > 1
    return build(ParallelismSpec, data), "given layout"


def _plan(cluster_ref: str, model_ref: str, layout: dict[str, Any], dp: int | None, gpus: int | None,
          global_batch: int, precision: str, from_search: bool, no_predict: bool, tokens: float | None,
          script_args: list[str] | None, opts: dict[str, Any]) -> tuple[JobPlan, list[str]]:
    """The job plan and the warnings to print once the job has rendered (so an exit-2 run prints one line)."""
    cluster = load_cluster(cluster_ref)
    model = load_model(model_ref)
    options = build(DeploySpec, {**{k: v for k, v in opts.items() if v is not None},
                                 "script_args": tuple(script_args or ()), "tokens": tokens})
    asked, source = _layout(cluster, model, layout, dp=dp, gpus=gpus, global_batch=global_batch,
                            precision=precision, from_search=from_search, flags=options.flags)
    if asked.pipeline_layout:  # counted from its grammar before anything is expanded; the error names the option
        parse_pipeline_layout(asked.pipeline_layout, asked.pp, asked.vpp, model.layers, path=("--pipeline-layout",))
    # predict the layout the framework runs (a ZeRO stage it lacks is mapped, or refused with --strict)
    par, _ = framework_layout(options.flags, asked, options.strict)
    prediction = None
    warnings: list[str] = []
    if options.device == "gpu" and not no_predict:
        prediction = predict(model, cluster, par, tokens, source=source)
        if not prediction.fits:
            warnings.append(f"the layout needs {prediction.memory_gib_per_gpu:.1f} GiB per GPU of "
                            f"{prediction.memory_capacity_gib:.1f} GiB (out of memory in the twin)")
    plan = plan_job(cluster, model, asked, options, prediction)
    return plan, warnings + list(plan.warnings)


DEPLOY_FIELDS = {"output": "log", "trainjob_runtime": "runtime", "cpu_procs_per_host": "cpu_procs"}
"""DeploySpec fields whose command parameter has another name (the Slurm log pattern is ``--log``)."""


def _warn(warnings: list[str]) -> None:
    for w in warnings:
        typer.echo(f"warning: {w}", err=True)


def _emit(text: str, plan: JobPlan, kind: str, output: Path | None, json_out: bool, executable: bool) -> None:
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as e:
            raise SpecError(f"cannot write: {e.strerror}", file=str(output)) from None
        if executable:
            output.chmod(output.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    if json_out:
        pred = plan.prediction
        print_json({"kind": kind, "hosts": plan.hosts, "procs_per_host": plan.procs_per_host,
                    "gpus_per_host": plan.gpus_per_host, "world_size": plan.world_size,
                    "layout": plan.parallelism.model_dump(mode="json"), "warnings": list(plan.warnings),
                    "prediction": None if pred is None else pred.__dict__,
                    "output": None if output is None else str(output), "text": text})
    elif output is None:
        typer.echo(text, nl=False)
    else:
        typer.echo(f"wrote {output}", err=True)


@deploy_app.command("slurm")
def slurm_command(
    model: ModelOpt,
    global_batch: GbsOpt,
    script_args: ArgsArg = None,
    cluster: str = ClusterOpt,
    tp: TpOpt = None, pp: PpOpt = None, dp: DpOpt = None, cp: CpOpt = None, ep: EpOpt = None, vpp: VppOpt = None,
    micro_batch: MbsOpt = None, recompute: RecomputeOpt = None, zero: ZeroOpt = None,
    sequence_parallel: SpOpt = None, precision: PrecisionOpt = "bf16", gpus: GpusOpt = None,
    first_stage_layers: FirstOpt = None, last_stage_layers: LastOpt = None, embedding_in_split: EmbOpt = None,
    loss_in_split: LossOpt = None, pipeline_layout: PlOpt = None,
    from_search: SearchOpt = False,
    script: ScriptOpt = "train.py", job_name: NameOpt = "clustertwin-train", flags: FlagsOpt = "megatron",
    device: DeviceOpt = "gpu", cpu_procs: CpuProcsOpt = 2, gpus_per_host: GphOpt = None,
    checkpoint_dir: CkptOpt = "checkpoints",
    ib_hca: HcaOpt = None, socket_ifname: IfOpt = None, gid_index: GidOpt = None, traffic_class: TcOpt = None,
    time_limit: Annotated[str, typer.Option("--time", help="Time limit (HH:MM:SS, D-HH:MM:SS).")] = "24:00:00",
    partition: Annotated[str | None, typer.Option("--partition", help="Slurm partition.")] = None,
    account: Annotated[str | None, typer.Option("--account", help="Slurm account.")] = None,
    qos: Annotated[str | None, typer.Option("--qos", help="Slurm QOS.")] = None,
    log: Annotated[str, typer.Option("--log", help="Slurm output pattern (%x job name, %j id).")] = "%x-%j.out",
    preempt_lead_s: Annotated[int, typer.Option("--preempt-lead-s", help="Signal this long before the end.")] = 300,
    preempt_grace_s: Annotated[int, typer.Option("--preempt-grace-s",
                                                 help="Checkpoint time before SIGTERM.")] = 240,
    container_image: Annotated[str | None, typer.Option("--container-image",
                                                        help="Run in this image with pyxis/enroot.")] = None,
    container_mounts: Annotated[str | None, typer.Option("--container-mounts",
                                                         help="pyxis mounts SRC:DST[,...].")] = None,
    switch_wait: Annotated[str, typer.Option("--switch-wait", help="Longest wait for the fewest leaf switches "
                                                                   "(--switches=N@wait).")] = "00:10:00",
    cpu_bind: CpuBindOpt = "none", strict: StrictOpt = False,
    tokens: TokensOpt = None, no_predict: NoPredictOpt = False, output: OutOpt = None, json_out: bool = JsonOpt,
) -> None:
    """An sbatch script: srun + torchrun across the nodes, NCCL for the fabric, requeue and
    checkpoint-on-preempt, and the predicted step time, memory and time-to-train in its header."""
    layout = {k: v for k, v in locals().items() if k in LAYOUT_FLAGS}
    opts = dict(script=script, job_name=job_name, flags=flags, device=device, cpu_procs_per_host=cpu_procs,
                gpus_per_host=gpus_per_host, checkpoint_dir=checkpoint_dir, ib_hca=ib_hca,
                socket_ifname=socket_ifname, gid_index=gid_index, traffic_class=traffic_class,
                time_limit=time_limit, partition=partition, account=account, qos=qos, output=log,
                preempt_lead_s=preempt_lead_s, preempt_grace_s=preempt_grace_s, container_image=container_image,
                container_mounts=container_mounts, switch_wait=switch_wait, cpu_bind=cpu_bind, strict=strict)
    with option_names(slurm_command, DEPLOY_FIELDS):
        plan, warnings = _plan(cluster, model, layout, dp, gpus, global_batch, precision, from_search, no_predict,
                               tokens, script_args, opts)
        text = render_sbatch(plan)
    _warn(warnings)
    _emit(text, plan, "slurm", output, json_out, executable=True)


@deploy_app.command("k8s")
def k8s_command(
    model: ModelOpt,
    global_batch: GbsOpt,
    script_args: ArgsArg = None,
    cluster: str = ClusterOpt,
    tp: TpOpt = None, pp: PpOpt = None, dp: DpOpt = None, cp: CpOpt = None, ep: EpOpt = None, vpp: VppOpt = None,
    micro_batch: MbsOpt = None, recompute: RecomputeOpt = None, zero: ZeroOpt = None,
    sequence_parallel: SpOpt = None, precision: PrecisionOpt = "bf16", gpus: GpusOpt = None,
    first_stage_layers: FirstOpt = None, last_stage_layers: LastOpt = None, embedding_in_split: EmbOpt = None,
    loss_in_split: LossOpt = None, pipeline_layout: PlOpt = None,
    from_search: SearchOpt = False,
    script: ScriptOpt = "train.py", job_name: NameOpt = "clustertwin-train", flags: FlagsOpt = "megatron",
    device: DeviceOpt = "gpu", cpu_procs: CpuProcsOpt = 2, gpus_per_host: GphOpt = None,
    checkpoint_dir: CkptOpt = "checkpoints",
    ib_hca: HcaOpt = None, socket_ifname: IfOpt = None, gid_index: GidOpt = None, traffic_class: TcOpt = None,
    kind: Annotated[str, typer.Option("--kind", help="trainjob (Kubeflow Trainer v2), pytorchjob (training-operator "
                                                     "v1), jobset, both (pytorchjob + jobset) or all.")] = "both",
    runtime: Annotated[str, typer.Option("--runtime", help="TrainJob: ClusterTrainingRuntime name.")] = (
        "torch-distributed"),
    cluster_queue: Annotated[str | None, typer.Option("--cluster-queue",
                                                      help="Kueue ClusterQueue: also emit the LocalQueue.")] = None,
    cpu_bind: CpuBindOpt = "none", strict: StrictOpt = False,
    image: Annotated[str, typer.Option("--image", help="Container image.")] = "nvcr.io/nvidia/pytorch:25.01-py3",
    namespace: Annotated[str, typer.Option("--namespace", help="Kubernetes namespace.")] = "default",
    queue: Annotated[str | None, typer.Option("--queue", help="Kueue LocalQueue (adds the queue label).")] = None,
    topology_label: Annotated[str | None, typer.Option("--topology-label",
                                                       help="Node label of a network block to pack pods into.")] = None,
    rdma_resource: Annotated[str, typer.Option("--rdma-resource", help="RDMA device resource name.")] = (
        "rdma/rdma_shared_device_a"),
    checkpoint_pvc: Annotated[str | None, typer.Option("--checkpoint-pvc",
                                                       help="PVC mounted at the checkpoint directory.")] = None,
    preempt_grace_s: Annotated[int, typer.Option("--preempt-grace-s",
                                                 help="terminationGracePeriodSeconds for the checkpoint.")] = 240,
    tokens: TokensOpt = None, no_predict: NoPredictOpt = False, output: OutOpt = None, json_out: bool = JsonOpt,
) -> None:
    """Kubeflow TrainJob (Trainer v2), PyTorchJob and JobSet manifests (GPUs, RDMA, /dev/shm, node affinity,
    optional Kueue queue); warns (refuses with --strict) when checkpoints have no persistent volume."""
    if kind not in KINDS:
        raise SpecError(f"--kind must be one of {', '.join(KINDS)} (got {kind!r})")
    layout = {k: v for k, v in locals().items() if k in LAYOUT_FLAGS}
    opts = dict(script=script, job_name=job_name, flags=flags, device=device, cpu_procs_per_host=cpu_procs,
                gpus_per_host=gpus_per_host, checkpoint_dir=checkpoint_dir, ib_hca=ib_hca,
                socket_ifname=socket_ifname, gid_index=gid_index, traffic_class=traffic_class, image=image,
                namespace=namespace, queue=queue, topology_label=topology_label, rdma_resource=rdma_resource,
                checkpoint_pvc=checkpoint_pvc, preempt_grace_s=preempt_grace_s, trainjob_runtime=runtime,
                cluster_queue=cluster_queue, cpu_bind=cpu_bind, strict=strict,
                preempt_lead_s=max(DeploySpec().preempt_lead_s, preempt_grace_s + 1))
    with option_names(k8s_command, DEPLOY_FIELDS):
        plan, warnings = _plan(cluster, model, layout, dp, gpus, global_batch, precision, from_search, no_predict,
                               tokens, script_args, opts)
        if cluster_queue is not None and queue is None:
            raise SpecError("--cluster-queue needs --queue (the LocalQueue's name)")
        text = render_manifests(plan, KINDS[kind])
    _warn(warnings)
    if plan.options.checkpoint_pvc is None and plan.options.device == "gpu":
        typer.echo(f"warning: {NO_PVC_WARNING}", err=True)
    _emit(text, plan, "k8s", output, json_out, executable=False)


def register(app: typer.Typer) -> None:
    app.add_typer(deploy_app, name="deploy")
