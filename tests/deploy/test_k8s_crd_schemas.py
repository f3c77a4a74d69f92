"""Every generated Kubernetes document validates against the real CRD schema of its kind: the
``openAPIV3Schema`` of Kubeflow Trainer's TrainJob, training-operator v1.9's PyTorchJob, JobSet and Kueue's
LocalQueue, vendored as JSON in tests/fixtures/crds (sources and commits in SOURCES.md), checked with
``jsonschema``. The Kubernetes extensions (``x-kubernetes-*``, CEL rules) are outside JSON Schema; the CEL rules
of the fields we emit are asserted directly (numProcPerNode >= 1)."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import pytest
import yaml
from tests.conftest import FIXTURES, run_cli

CRDS = FIXTURES / "crds"
SCHEMA_FILE = {
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainjob.v1alpha1.json",
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchjob.v1.json",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.v1alpha2.json",
    ("kueue.x-k8s.io/v1beta1", "LocalQueue"): "localqueue.v1beta1.json",
}


@functools.cache
def validator(name: str) -> jsonschema.Draft7Validator:
    schema = json.loads((CRDS / name).read_text(encoding="utf-8"))
    schema.pop("$comment", None)
    return jsonschema.Draft7Validator(schema)


def errors(doc: dict[str, Any]) -> list[str]:
    name = SCHEMA_FILE[(doc["apiVersion"], doc["kind"])]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(name).iter_errors(doc)]


def manifests(*extra: str) -> list[dict[str, Any]]:
    res = run_cli("deploy", "k8s", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2",
                  "--global-batch", "128", "--kind", "all", *extra)
    assert res.code == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d is not None]


VARIANTS = {
    "plain": (),
    "kueue+pvc+topology": ("--queue", "team-a", "--cluster-queue", "cq-h100", "--checkpoint-pvc", "ckpt",
                           "--topology-label", "network.example.com/block", "--cpu-bind", "numa"),
    "cpu": ("--device", "cpu", "--cpu-procs", "4", "--flags", "none"),
    "torchtitan": ("--flags", "torchtitan", "--zero", "3"),
    "nemo": ("--flags", "nemo", "--vpp", "2"),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_manifest_validates_against_the_vendored_crd_schema(variant):
    docs = manifests(*VARIANTS[variant])
    kinds = [d["kind"] for d in docs]
    assert {"TrainJob", "PyTorchJob", "JobSet"} <= set(kinds)
    if "--cluster-queue" in VARIANTS[variant]:
        assert kinds[0] == "LocalQueue"
    for d in docs:
        assert errors(d) == [], f"{d['kind']}: {errors(d)[:5]}"


def test_the_validator_catches_a_wrong_field():
    """The schemas are strict enough to fail: a string where TrainJob wants an integer, a list for a string, a missing required field."""
    docs = {d["kind"]: d for d in manifests()}
    tj = json.loads(json.dumps(docs["TrainJob"]))
    tj["spec"]["trainer"]["numNodes"] = "eight"
    assert any("numNodes" in e for e in errors(tj))
    js = json.loads(json.dumps(docs["JobSet"]))
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = ["Never"]
    assert any("restartPolicy" in e for e in errors(js))
    del docs["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]
    assert any("pytorchReplicaSpecs" in e for e in errors(docs["PyTorchJob"]))


def test_trainjob_runs_the_layout_on_the_runtime():
    tj = next(d for d in manifests("--checkpoint-pvc", "ckpt") if d["kind"] == "TrainJob")
    t = tj["spec"]["trainer"]
    assert tj["spec"]["runtimeRef"] == {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org",
                                        "kind": "ClusterTrainingRuntime"}
    assert t["numNodes"] == 8 and t["numProcPerNode"] == 8 >= 1
    assert t["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 8
    assert t["command"][0] == "torchrun" and "--tensor-model-parallel-size" in t["command"]
    pod = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    spec = pod["template"]["spec"]["template"]["spec"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}} in spec["volumes"]
    assert spec["containers"][0]["name"] == "node"


def test_no_checkpoint_volume_warns_and_strict_refuses():
    res = run_cli("deploy", "k8s", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "64")
    assert res.code == 0
    assert "warning: no --checkpoint-pvc" in res.stderr and "# warning: no --checkpoint-pvc" in res.stdout
    strict = run_cli("deploy", "k8s", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "64", "--strict")
    assert strict.code == 2 and "--strict refuses" in strict.stderr and strict.stdout == ""
    ok = run_cli("deploy", "k8s", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "64", "--strict",
                 "--checkpoint-pvc", "ckpt")
    assert ok.code == 0 and "no --checkpoint-pvc" not in ok.stderr + ok.stdout
