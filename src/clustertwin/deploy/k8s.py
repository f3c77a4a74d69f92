"""Kubernetes manifests for a multi-node torchrun job (``clustertwin deploy k8s``): a Kubeflow Trainer v2
``TrainJob`` (``trainer.kubeflow.org/v1alpha1``, on a ClusterTrainingRuntime such as ``torch-distributed``), a
Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``, training-operator v1, removed from its main branch in Feb 2025 but
still deployed), a ``JobSet`` (``jobset.x-k8s.io/v1alpha2``) and optionally the Kueue ``LocalQueue``
(``kueue.x-k8s.io/v1beta1``) the job is queued in. Tests validate every document against the projects' CRD schemas.

Pods request whole GPU servers (``nvidia.com/gpu`` or ``amd.com/gpu``) and, on RDMA fabrics, an RDMA
device resource, ``IPC_LOCK`` and the host network; ``/dev/shm`` is a memory-backed volume; node
affinity asks for GPU Feature Discovery's labels; an optional topology label keeps the pods in one
network block; an optional Kueue queue label hands the job to Kueue. Manifests are built as data and
emitted with ``yaml.safe_dump``; strings in ``command``/``env`` have ``$`` doubled so Kubernetes'
``$(VAR)`` expansion leaves them as written.
"""

from __future__ import annotations

import copy
import posixpath
from typing import Any

import yaml

from clustertwin.deploy.job import DeploySpec, JobPlan, Prediction, comment_safe, k8s_name, plan_job
from clustertwin.deploy.slurm import job_env
from clustertwin.errors import SpecError
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec

WORKDIR = "/workspace"
"""Working directory of the training container (NGC PyTorch images' default); relative paths start here."""
CONTAINER = "pytorch"
"""Container name; the training-operator requires 'pytorch' for PyTorchJob replicas."""
RJOB = "node"
"""JobSet replicated-job name: pods are ``<jobset>-node-0-<index>``."""
MAX_RESTARTS = 3
"""Whole-job restarts after a failure (JobSet failurePolicy, PyTorchJob backoffLimit)."""
LABEL_JOB = "clustertwin.io/job"
ANNOTATION_PREFIX = "clustertwin.io/"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
RDMA_FABRICS = ("infiniband", "roce", "omnipath")
TRAINER_API = "trainer.kubeflow.org"
TRAINER_CONTAINER = "node"
"""Container (and replicated job) name of Trainer v2's torch runtimes."""
PATCH_MANAGER = "clustertwin.io/deploy"
KINDS: dict[str, tuple[str, ...]] = {
    "trainjob": ("trainjob",), "pytorchjob": ("pytorchjob",), "jobset": ("jobset",),
    "both": ("pytorchjob", "jobset"), "all": ("trainjob", "pytorchjob", "jobset"),
}
PYTORCHJOB_NOTE = ("note: PyTorchJob (kubeflow.org/v1) needs training-operator v1, removed from its main branch in "
                   "Feb 2025; Kubeflow Trainer v2 runs a TrainJob (--kind trainjob)")
NO_PVC_WARNING = ("no --checkpoint-pvc: checkpoints are written inside the container and lost when the pod ends "
                  "(give a ReadWriteMany PersistentVolumeClaim)")


def k8s_literal(text: str) -> str:
    """``text`` with ``$`` doubled: Kubernetes reduces ``$$`` to ``$`` when it expands ``$(VAR)`` in
    command, args and env values, so the container sees ``text`` exactly."""
    return text.replace("$", "$$")


def _container_path(path: str) -> str:
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(WORKDIR, path))


def _metadata(plan: JobPlan, name: str) -> dict[str, Any]:
    o = plan.options
    labels = {LABEL_JOB: name}
    if o.queue is not None:
        labels[KUEUE_QUEUE_LABEL] = o.queue
    annotations = {
        ANNOTATION_PREFIX + "job-name": o.job_name,
        ANNOTATION_PREFIX + "summary": " | ".join(plan.header_lines()),
    }
    return {"name": name, "namespace": o.namespace, "labels": labels, "annotations": annotations}


def _env(plan: JobPlan, extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = list(extra)
    for v in job_env(plan):
        out.append({"name": v.name, "value": k8s_literal(v.value)})
    out.append({"name": "CHECKPOINT_DIR", "value": k8s_literal(plan.options.checkpoint_dir)})
    out.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    return out


def _pod_template(plan: JobPlan, name: str, command: list[str], restart_policy: str,
                  extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    """Pod template; ``command`` is final (user parts already passed through :func:`k8s_literal`)."""
    o = plan.options
    cluster = plan.cluster
    vendor = cluster.node.gpu.vendor.lower()
    rdma = o.device == "gpu" and cluster.fabric.kind in RDMA_FABRICS
    limits: dict[str, Any] = {}
    if o.device == "gpu":
        limits[GPU_RESOURCE.get(vendor, "nvidia.com/gpu")] = plan.gpus_per_host
        if rdma:
            limits[o.rdma_resource] = o.rdma_per_pod
    else:
        limits["cpu"] = plan.procs_per_host
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": o.image,
        "imagePullPolicy": "IfNotPresent",
        "workingDir": WORKDIR,
        "command": command,
        "env": _env(plan, extra_env),
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if rdma:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    if o.checkpoint_pvc is not None:
        container["volumeMounts"].append({"name": "checkpoints", "mountPath": _container_path(o.checkpoint_dir)})
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": o.checkpoint_pvc}})
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": o.preempt_grace_s,
        "containers": [container],
        "volumes": volumes,
    }
    if rdma and o.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    affinity: dict[str, Any] = {}
    if o.device == "gpu" and vendor == "nvidia":
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
                {"key": "nvidia.com/gpu.count", "operator": "In", "values": [str(plan.gpus_per_host)]},
            ]}]}}
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    metadata: dict[str, Any] = {"labels": {LABEL_JOB: name}}
    if o.topology_label is not None:
        affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"labelSelector": {"matchLabels": {LABEL_JOB: name}},
                                "topologyKey": o.topology_label}}]}
        if o.queue is not None:
            metadata["annotations"] = {KUEUE_PREFERRED_TOPOLOGY: o.topology_label}
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": metadata, "spec": spec}


def _torchrun(plan: JobPlan) -> list[str]:
    """torchrun and its binding option (``--numa-binding=node``, torch 2.8+, for GPU jobs)."""
    if plan.options.device == "gpu" and plan.options.cpu_bind == "numa":
        return ["torchrun", "--numa-binding=node"]
    return ["torchrun"]


def _script_command(plan: JobPlan) -> list[str]:
    """Script and its arguments, escaped for Kubernetes' ``$(VAR)`` expansion."""
    return [k8s_literal(c) for c in (plan.options.script, *plan.layout_args, *plan.options.script_args)]


def pytorchjob(plan: JobPlan) -> dict[str, Any]:
    """Kubeflow PyTorchJob: one Master and hosts-1 Workers; the training-operator sets ``PET_*`` variables
    (nnodes, node rank, master address) that torchrun reads."""
    name = k8s_name(plan.options.job_name)
    command = [*_torchrun(plan), *_script_command(plan)]
    template = _pod_template(plan, name, command, "OnFailure", [])
    replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}}
    if plan.hosts > 1:
        replicas["Worker"] = {"replicas": plan.hosts - 1, "restartPolicy": "OnFailure",
                              "template": copy.deepcopy(template)}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _metadata(plan, name),
        "spec": {
            "nprocPerNode": str(plan.procs_per_host),
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": MAX_RESTARTS},
            "pytorchReplicaSpecs": replicas,
        },
    }


def jobset(plan: JobPlan) -> dict[str, Any]:
    """JobSet with one Indexed Job of ``hosts`` pods; rank 0's pod is the rendezvous head, reached through
    the JobSet's headless service (``<jobset>-node-0-0.<jobset>``)."""
    name = k8s_name(plan.options.job_name)
    head = f"{name}-{RJOB}-0-0.{name}"
    command = [
        *_torchrun(plan),
        f"--nnodes={plan.hosts}",
        f"--nproc_per_node={plan.procs_per_host}",
        "--node_rank=$(NODE_RANK)",
        f"--master_addr={head}",
        f"--master_port={plan.options.rdzv_port}",
    ]
    node_rank = {"name": "NODE_RANK", "valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}}
    template = _pod_template(plan, name, command + _script_command(plan), "Never", [node_rank])
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _metadata(plan, name),
        "spec": {
            "failurePolicy": {"maxRestarts": MAX_RESTARTS},
            "network": {"enableDNSHostnames": True, "subdomain": name},
            "replicatedJobs": [{
                "name": RJOB,
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": plan.hosts,
                    "completions": plan.hosts,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": template,
                }},
            }],
        },
    }


def trainjob(plan: JobPlan) -> dict[str, Any]:
    """Kubeflow Trainer v2 TrainJob on a ClusterTrainingRuntime: the runtime's torch plugin sets the ``PET_*``
    variables torchrun reads; the pod parts a runtime does not know (volumes, tolerations, affinity, grace
    period, IPC_LOCK) go in a ``runtimePatches`` entry. Trainer's patches cannot set ``hostNetwork``: RDMA pods
    need a runtime that sets it, or SR-IOV/Multus networking."""
    name = k8s_name(plan.options.job_name)
    pod = _pod_template(plan, name, [*_torchrun(plan), *_script_command(plan)], "Never", [])
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    patch_container: dict[str, Any] = {"name": TRAINER_CONTAINER, "volumeMounts": c["volumeMounts"]}
    if "securityContext" in c:
        patch_container["securityContext"] = c["securityContext"]
    pod_patch: dict[str, Any] = {k: spec[k] for k in ("terminationGracePeriodSeconds", "tolerations", "affinity",
                                                       "volumes") if k in spec}
    pod_patch["containers"] = [patch_container]
    return {
        "apiVersion": f"{TRAINER_API}/v1alpha1",
        "kind": "TrainJob",
        "metadata": _metadata(plan, name),
        "spec": {
            "runtimeRef": {"name": plan.options.trainjob_runtime, "apiGroup": TRAINER_API,
                           "kind": "ClusterTrainingRuntime"},
            "trainer": {"image": c["image"], "command": c["command"], "env": c["env"],
                        "numNodes": plan.hosts, "numProcPerNode": plan.procs_per_host,
                        "resourcesPerNode": c["resources"]},
            "runtimePatches": [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [{"name": RJOB, "template": {"spec": {"template": {"spec": pod_patch}}}}]}}}}],
        },
    }


def localqueue(plan: JobPlan) -> dict[str, Any]:
    """Kueue LocalQueue ``queue`` in the job's namespace, feeding ClusterQueue ``cluster_queue``."""
    o = plan.options
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": o.queue, "namespace": o.namespace},
            "spec": {"clusterQueue": o.cluster_queue}}


def render_manifests(plan: JobPlan, kinds: tuple[str, ...] = ("pytorchjob", "jobset")) -> str:
    """The chosen manifests (and the LocalQueue when a ClusterQueue is given) as one multi-document YAML
    stream, with a header comment. Without a checkpoint PVC the header warns; ``strict`` refuses."""
    o = plan.options
    warnings = list(plan.warnings)
    if o.checkpoint_pvc is None and o.device == "gpu":
        if o.strict:
            raise SpecError(f"{NO_PVC_WARNING}; --strict refuses it", path=("checkpoint_pvc",))
        warnings.append(NO_PVC_WARNING)
    builders = {"trainjob": trainjob, "pytorchjob": pytorchjob, "jobset": jobset}
    docs = [builders[k](plan) for k in kinds]
    if o.queue is not None and o.cluster_queue is not None:
        docs.insert(0, localqueue(plan))
    notes = [PYTORCHJOB_NOTE] if "pytorchjob" in kinds else []
    header = "".join(f"# {comment_safe(line)}\n" for line in
                     ["Generated by clustertwin deploy k8s; apply with: kubectl apply -f <this file>",
                      *plan.header_lines(), *[f"warning: {w}" for w in warnings[len(plan.warnings):]], *notes])
    body = yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, width=120, allow_unicode=False)
    return header + body


def k8s_manifests(cluster: ClusterSpec, model: ModelSpec, parallelism: ParallelismSpec,
                  options: DeploySpec | None = None, prediction: Prediction | None = None,
                  kinds: tuple[str, ...] = ("pytorchjob", "jobset")) -> str:
    """PyTorchJob and/or JobSet manifests for ``parallelism`` of ``model`` on ``cluster``."""
    plan = plan_job(cluster, model, parallelism, options or DeploySpec(), prediction)
    return render_manifests(plan, kinds)
