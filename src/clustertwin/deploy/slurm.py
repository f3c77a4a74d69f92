"""Slurm batch script for a multi-node torchrun job (``clustertwin deploy slurm``).

One task per host runs torchrun, which starts one process per GPU; the c10d rendezvous runs on the first
host of the allocation (``scontrol show hostnames``). The script requests whole nodes (``--exclusive``),
requeues after node failures (``--requeue``) and checkpoints before the time limit or a preemption
(``--signal=B:USR1@lead``, see the template). It asks for the fewest leaf switches the topology allows
(``--switches=N@wait``, N from :meth:`Topology.span`), runs the step in a container image with pyxis/enroot
when one is given (``--container-image``) and can bind each rank to its GPU's NUMA node (torchrun
``--numa-binding=node``). Every user string reaches the shell through ``shlex.quote``; ``#SBATCH`` values are
validated or sanitised (``DeploySpec``).
"""

from __future__ import annotations

import shlex
from functools import cache

import jinja2

from clustertwin.deploy.job import DeploySpec, JobPlan, Prediction, comment_safe, plan_job, slurm_job_name
from clustertwin.deploy.nccl_env import EnvVar, nccl_env
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("clustertwin.deploy", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # shell, not HTML: every value is shlex-quoted before it reaches the template
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _quote_arg(arg: str, checkpoint_dir: str) -> str:
    # the checkpoint directory is already in $CHECKPOINT_DIR: refer to it, so the script names it once
    return '"$CHECKPOINT_DIR"' if arg == checkpoint_dir else shlex.quote(arg)


def shell_value(value: str) -> str:
    """``shlex.quote``, plus quotes around values that start with ``=`` (``NCCL_IB_HCA==mlx5_0`` is legal
    shell but reads like a typo)."""
    q = shlex.quote(value)
    return f"'{value}'" if q == value and value.startswith("=") else q


def arg_lines(args: list[str] | tuple[str, ...], checkpoint_dir: str) -> list[str]:
    """Shell-quoted arguments, one ``--flag value`` pair per line (a flag followed by its value)."""
    lines: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{_quote_arg(a, checkpoint_dir)} {_quote_arg(args[i + 1], checkpoint_dir)}")
            i += 2
        else:
            lines.append(_quote_arg(a, checkpoint_dir))
            i += 1
    return lines


def job_env(plan: JobPlan) -> list[EnvVar]:
    """NCCL variables for the fabric (GPU jobs) plus those the layout flags need."""
    o = plan.options
    env: list[EnvVar] = []
    if o.device == "gpu":
        env = nccl_env(plan.cluster, ib_hca=o.ib_hca, socket_ifname=o.socket_ifname, gid_index=o.gid_index,
                       traffic_class=o.traffic_class, gpus_per_host=plan.gpus_per_host)
    env += [EnvVar(n, v, w) for n, v, w in plan.launcher_env]
    return env


def leaf_switches(plan: JobPlan) -> int | None:
    """Leaf switches (per rail) that ``plan.hosts`` consecutive nodes span in the cluster's topology; None when
    the cluster has no scale-out switches (a single node) or the job uses one host."""
    from clustertwin.topology import build

    if plan.hosts <= 1:
        return None
    topo = build(plan.cluster)
    hosts_per_node = max(1, plan.cluster.node.gpus // max(1, plan.gpus_per_host or plan.cluster.node.gpus))
    nodes = min(topo.nodes, -(-plan.hosts // hosts_per_node))
    span = topo.span(nodes)
    return span.leaves or None


def srun_options(plan: JobPlan) -> list[str]:
    """Options of the ``srun`` that starts one torchrun per host (already shell-safe)."""
    o = plan.options
    opts = ["--kill-on-bad-exit=1", "--ntasks-per-node=1", "--cpu-bind=none"]
    if o.container_image is not None:
        mounts = '"$PWD:$PWD"' + ("" if o.container_mounts is None else "," + shlex.quote(o.container_mounts))
        opts += [f"--container-image={shlex.quote(o.container_image)}", f"--container-mounts={mounts}",
                 '--container-workdir="$PWD"']
    return opts


def render_sbatch(plan: JobPlan) -> str:
    """The sbatch script of ``plan``."""
    o = plan.options
    fabric = plan.cluster.fabric
    directives = [f"--{k}={v}" for k, v in (("partition", o.partition), ("account", o.account), ("qos", o.qos))
                  if v is not None]
    leaves = leaf_switches(plan)
    if leaves is not None:
        directives.append(f"--switches={leaves}@{o.switch_wait}")
    env = job_env(plan)
    omp = max(1, (plan.cpus_per_host or plan.procs_per_host) // plan.procs_per_host)
    args = [*plan.layout_args, *o.script_args]
    return _environment().get_template("sbatch.sh.j2").render(
        header=plan.header_lines(),
        job_name=slurm_job_name(o.job_name),
        hosts=plan.hosts,
        gpus_per_host=plan.gpus_per_host,
        cpus_per_task=plan.cpus_per_host,
        time_limit=o.time_limit,
        output=o.output,
        preempt_lead_s=o.preempt_lead_s,
        preempt_grace_s=o.preempt_grace_s,
        extra_directives=directives,
        rdzv_port=o.rdzv_port,
        omp_threads=omp,
        env_title=comment_safe(f"NCCL for {fabric.id or fabric.name} ({fabric.kind}, {fabric.gbit_per_s:g} Gbit/s) "
                               f"and {plan.cluster.node.id or plan.cluster.node.name}"
                               if o.device == "gpu" else "framework settings"),
        env=[EnvVar(v.name, shell_value(v.value), comment_safe(v.why)) for v in env],
        checkpoint_dir=shlex.quote(o.checkpoint_dir),
        procs_per_host=plan.procs_per_host,
        srun_options=srun_options(plan),
        torchrun_options=["--numa-binding=node"] if o.device == "gpu" and o.cpu_bind == "numa" else [],
        script=shlex.quote(o.script),
        arg_lines=arg_lines(args, o.checkpoint_dir),
    )


def slurm_script(cluster: ClusterSpec, model: ModelSpec, parallelism: ParallelismSpec,
                 options: DeploySpec | None = None, prediction: Prediction | None = None) -> str:
    """An sbatch script that runs ``parallelism`` of ``model`` on ``cluster`` with torchrun."""
    plan = plan_job(cluster, model, parallelism, options or DeploySpec(), prediction)
    return render_sbatch(plan)
