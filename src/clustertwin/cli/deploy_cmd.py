"""``clustertwin deploy slurm|k8s``: an sbatch script or Kubernetes manifests (PyTorchJob, JobSet) that run a
layout with torchrun, with the fabric's NCCL settings and the twin's prediction in a header comment.

The layout comes from ``--tp --pp --dp ...`` (dp defaults to the GPUs left over) or ``--from-search``
(the fastest fitting layout of ``train search``). Arguments after ``--`` go to the training script."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import typer

from clustertwin.cli.common import (
    ClusterOpt,
    JsonOpt,
    load_cluster,
    print_json,
    require_gpus,
    spec_option,
)
from clustertwin.cli.layout_options import (
    GlobalBatchOpt,
    LayoutOpts,
    PrecOpt,
    SeqOpt,
    StackOpt,
    layout_from_params,
    layout_options,
    resolve_layout,
)
from clustertwin.cli.option_errors import option_names
from clustertwin.cli.train_run import seq_model
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

ModelOpt = typer.Option(..., "--model", "-m", help="Model catalog id or YAML/JSON file.")
GpusOpt = typer.Option(None, "--gpus", "-g", help="GPUs of the job (default: the whole cluster).")
SearchOpt = typer.Option(False, "--from-search", help="Use the fastest fitting layout of train search.")
ArgsArg = typer.Argument(None, help="Arguments for the training script (after --).")
ScriptOpt = spec_option(DeploySpec, "script", "--script")
NameOpt = spec_option(DeploySpec, "job_name", "--job-name")
FlagsOpt = spec_option(DeploySpec, "flags", "--flags")
StrictOpt = spec_option(DeploySpec, "strict", "--strict")
CpuBindOpt = spec_option(DeploySpec, "cpu_bind", "--cpu-bind")
DeviceOpt = spec_option(DeploySpec, "device", "--device")
CpuProcsOpt = spec_option(DeploySpec, "cpu_procs_per_host", "--cpu-procs")
GphOpt = spec_option(DeploySpec, "gpus_per_host", "--gpus-per-host")
CkptOpt = spec_option(DeploySpec, "checkpoint_dir", "--checkpoint-dir")
HcaOpt = spec_option(DeploySpec, "ib_hca", "--ib-hca")
IfOpt = spec_option(DeploySpec, "socket_ifname", "--socket-ifname")
GidOpt = spec_option(DeploySpec, "gid_index", "--gid-index")
TcOpt = spec_option(DeploySpec, "traffic_class", "--traffic-class")
GraceOpt = spec_option(DeploySpec, "preempt_grace_s", "--preempt-grace-s")
TokensOpt = spec_option(DeploySpec, "tokens", "--tokens")
NoPredictOpt = typer.Option(False, "--no-predict", help="Leave the twin's prediction out of the header.")
OutOpt = typer.Option(None, "--output", "-o", help="Write to FILE instead of stdout.")
KindOpt = typer.Option("both", "--kind", help=f"Manifests: {', '.join(KINDS)} (trainjob: Kubeflow Trainer v2; "
                       "pytorchjob: training-operator v1; both: pytorchjob + jobset).")


def _layout(cluster: ClusterSpec, model: ModelSpec, given: dict[str, Any], *, gpus: int | None,
            global_batch: int, precision: str, stack: str, from_search: bool,
            flags: str) -> tuple[ParallelismSpec, str]:
    """The layout the job runs: the options as ``train estimate --strict-layout`` resolves them (dp from the
    GPUs, sequence parallelism and ZeRO from the stack), or with ``--from-search`` the given fields pinned
    and the rest searched."""
    require_gpus(gpus)
    fixed = layout_from_params(given)
    if from_search:
        return layout_from_search(model, cluster, global_batch=global_batch, gpus=gpus, precision=precision,
                                  fixed=fixed, flags=flags, software_stack=stack)
    return resolve_layout(fixed, cluster, model, gpus=gpus or cluster.total_gpus, global_batch=global_batch,
                          precision=precision, stack=stack), "given layout"


def _plan(cluster_ref: str, model_ref: str, layout: dict[str, Any], run: dict[str, Any], from_search: bool,
          no_predict: bool, tokens: float | None, script_args: list[str] | None,
          opts: dict[str, Any]) -> tuple[JobPlan, list[str]]:
    """The job plan and the warnings to print once the job has rendered (so an exit-2 run prints one line);
    ``run``: gpus, global_batch, seq_len, precision and stack of the command."""
    cluster = load_cluster(cluster_ref)
    model = seq_model(model_ref, run["seq_len"])
    options = build(DeploySpec, {**{k: v for k, v in opts.items() if v is not None},
                                 "script_args": tuple(script_args or ()), "tokens": tokens})
    asked, source = _layout(cluster, model, layout, gpus=run["gpus"], global_batch=run["global_batch"],
                            precision=run["precision"], stack=run["stack"], from_search=from_search,
                            flags=options.flags)
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


RUN_PARAMS = ("gpus", "global_batch", "seq_len", "precision", "stack")
"""The command parameters around the layout that :func:`_plan` takes as ``run``."""


DEPLOY_FIELDS = {"output": "log", "trainjob_runtime": "runtime", "cpu_procs_per_host": "cpu_procs",
                 "image": "container_image", "sequence_parallel": "sp", "software_stack": "stack"}
"""DeploySpec (and layout) fields whose command parameter has another name (the Slurm log pattern is ``--log``;
the Kubernetes image is ``--container-image`` as the Slurm one)."""


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
@layout_options()
def slurm_command(
    model: str = ModelOpt,
    global_batch: int = GlobalBatchOpt,
    script_args: list[str] | None = ArgsArg,
    cluster: str = ClusterOpt,
    layout: dict[str, Any] = LayoutOpts,
    precision: str = PrecOpt, gpus: int | None = GpusOpt, seq_len: int | None = SeqOpt, stack: str = StackOpt,
    from_search: bool = SearchOpt,
    script: str = ScriptOpt, job_name: str = NameOpt, flags: str = FlagsOpt,
    device: str = DeviceOpt, cpu_procs: int = CpuProcsOpt, gpus_per_host: int | None = GphOpt,
    checkpoint_dir: str = CkptOpt,
    ib_hca: str | None = HcaOpt, socket_ifname: str | None = IfOpt, gid_index: int | None = GidOpt,
    traffic_class: int | None = TcOpt,
    time_limit: str = spec_option(DeploySpec, "time_limit", "--time"),
    partition: str | None = spec_option(DeploySpec, "partition", "--partition"),
    account: str | None = spec_option(DeploySpec, "account", "--account"),
    qos: str | None = spec_option(DeploySpec, "qos", "--qos"),
    log: str = spec_option(DeploySpec, "output", "--log", help="Slurm output pattern (%x job name, %j id; its "
                           "directory must exist at submission)."),
    preempt_lead_s: int = spec_option(DeploySpec, "preempt_lead_s", "--preempt-lead-s"),
    preempt_grace_s: int = GraceOpt,
    container_image: str | None = spec_option(DeploySpec, "container_image", "--container-image"),
    container_mounts: str | None = spec_option(DeploySpec, "container_mounts", "--container-mounts"),
    switch_wait: str = spec_option(DeploySpec, "switch_wait", "--switch-wait"),
    cpu_bind: str = CpuBindOpt, strict: bool = StrictOpt,
    tokens: float | None = TokensOpt, no_predict: bool = NoPredictOpt, output: Path | None = OutOpt,
    json_out: bool = JsonOpt,
) -> None:
    """An sbatch script: srun + torchrun across the nodes, NCCL for the fabric, requeue and
    checkpoint-on-preempt, and the predicted step time, memory and time-to-train in its header."""
    run = {k: v for k, v in locals().items() if k in RUN_PARAMS}
    opts = dict(script=script, job_name=job_name, flags=flags, device=device, cpu_procs_per_host=cpu_procs,
                gpus_per_host=gpus_per_host, checkpoint_dir=checkpoint_dir, ib_hca=ib_hca,
                socket_ifname=socket_ifname, gid_index=gid_index, traffic_class=traffic_class,
                time_limit=time_limit, partition=partition, account=account, qos=qos, output=log,
                preempt_lead_s=preempt_lead_s, preempt_grace_s=preempt_grace_s, container_image=container_image,
                container_mounts=container_mounts, switch_wait=switch_wait, cpu_bind=cpu_bind, strict=strict)
    with option_names(slurm_command, DEPLOY_FIELDS):
        plan, warnings = _plan(cluster, model, layout, run, from_search, no_predict, tokens, script_args, opts)
        text = render_sbatch(plan)
    _warn(warnings)
    _emit(text, plan, "slurm", output, json_out, executable=True)


@deploy_app.command("k8s")
@layout_options()
def k8s_command(
    model: str = ModelOpt,
    global_batch: int = GlobalBatchOpt,
    script_args: list[str] | None = ArgsArg,
    cluster: str = ClusterOpt,
    layout: dict[str, Any] = LayoutOpts,
    precision: str = PrecOpt, gpus: int | None = GpusOpt, seq_len: int | None = SeqOpt, stack: str = StackOpt,
    from_search: bool = SearchOpt,
    script: str = ScriptOpt, job_name: str = NameOpt, flags: str = FlagsOpt,
    device: str = DeviceOpt, cpu_procs: int = CpuProcsOpt, gpus_per_host: int | None = GphOpt,
    checkpoint_dir: str = CkptOpt,
    ib_hca: str | None = HcaOpt, socket_ifname: str | None = IfOpt, gid_index: int | None = GidOpt,
    traffic_class: int | None = TcOpt,
    kind: str = KindOpt,
    runtime: str = spec_option(DeploySpec, "trainjob_runtime", "--runtime"),
    cluster_queue: str | None = spec_option(DeploySpec, "cluster_queue", "--cluster-queue"),
    cpu_bind: str = CpuBindOpt, strict: bool = StrictOpt,
    container_image: str = spec_option(DeploySpec, "image", "--container-image"),
    namespace: str = spec_option(DeploySpec, "namespace", "--namespace"),
    queue: str | None = spec_option(DeploySpec, "queue", "--queue"),
    topology_label: str | None = spec_option(DeploySpec, "topology_label", "--topology-label"),
    rdma_resource: str = spec_option(DeploySpec, "rdma_resource", "--rdma-resource"),
    checkpoint_pvc: str | None = spec_option(DeploySpec, "checkpoint_pvc", "--checkpoint-pvc"),
    preempt_grace_s: int = GraceOpt,
    tokens: float | None = TokensOpt, no_predict: bool = NoPredictOpt, output: Path | None = OutOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Kubeflow TrainJob (Trainer v2), PyTorchJob and JobSet manifests (GPUs, RDMA, /dev/shm, node affinity,
    optional Kueue queue); warns (refuses with --strict) when checkpoints have no persistent volume."""
    if kind not in KINDS:
        raise SpecError(f"--kind must be one of {', '.join(KINDS)} (got {kind!r})")
    run = {k: v for k, v in locals().items() if k in RUN_PARAMS}
    opts = dict(script=script, job_name=job_name, flags=flags, device=device, cpu_procs_per_host=cpu_procs,
                gpus_per_host=gpus_per_host, checkpoint_dir=checkpoint_dir, ib_hca=ib_hca,
                socket_ifname=socket_ifname, gid_index=gid_index, traffic_class=traffic_class, image=container_image,
                namespace=namespace, queue=queue, topology_label=topology_label, rdma_resource=rdma_resource,
                checkpoint_pvc=checkpoint_pvc, preempt_grace_s=preempt_grace_s, trainjob_runtime=runtime,
                cluster_queue=cluster_queue, cpu_bind=cpu_bind, strict=strict,
                preempt_lead_s=max(DeploySpec().preempt_lead_s, preempt_grace_s + 1))
    with option_names(k8s_command, DEPLOY_FIELDS):
        plan, warnings = _plan(cluster, model, layout, run, from_search, no_predict, tokens, script_args, opts)
        if cluster_queue is not None and queue is None:
            raise SpecError("--cluster-queue needs --queue (the LocalQueue's name)")
        text = render_manifests(plan, KINDS[kind])
    _warn(warnings)
    if plan.options.checkpoint_pvc is None and plan.options.device == "gpu":
        typer.echo(f"warning: {NO_PVC_WARNING}", err=True)
    _emit(text, plan, "k8s", output, json_out, executable=False)


def register(app: typer.Typer) -> None:
    app.add_typer(deploy_app, name="deploy")
