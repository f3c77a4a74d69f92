"""Kubernetes manifests: golden files for the reference cluster, structure against minimal subsets of the
published schemas (tests/fixtures/deploy/k8s-schemas.json, no network), and hostile user strings."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
import yaml
from tests.conftest import FIXTURES

from clustertwin import specs
from clustertwin.deploy import DeploySpec, Prediction, plan_job
from clustertwin.deploy.k8s import jobset, k8s_literal, k8s_manifests, pytorchjob
from clustertwin.errors import SpecError

GOLDEN = FIXTURES / "deploy"
REGEN = bool(os.environ.get("CLUSTERTWIN_REGEN_GOLDEN"))
SCHEMAS = json.loads((GOLDEN / "k8s-schemas.json").read_text(encoding="utf-8"))

HOSTILE = "evil job'\"$(touch /tmp/PWNED) `id`; rm -rf /\n---\nkind: Secret\n$$(HOME) &anchor *ref {a: 1} # c"


def cluster(ref: str = "ref-1k-h100") -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, ref, kind="cluster")


def model(ref: str = "llama3-70b") -> specs.ModelSpec:
    return specs.load(specs.ModelSpec, ref, kind="model")


REF_LAYOUT = specs.ParallelismSpec(tp=8, pp=4, dp=32, micro_batch=1, global_batch=1024, sequence_parallel=True,
                                   recompute="selective", zero=1, precision="bf16")
REF_PREDICTION = Prediction(step_time_s=7.8, mfu=0.5, tokens_per_s=1.07e6, memory_gib_per_gpu=41.9,
                            memory_capacity_gib=74.5, fits=True, tokens=1.4e12, days=15.2, gpu_hours=373_888.0,
                            source="given layout")


# --- a minimal JSON-schema validator (type, enum, required, properties, additionalProperties, items,
# minItems, minimum, maximum, pattern, maxLength, $ref into the same document)
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int}


def validate(value: Any, schema: dict, path: str = "$") -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/definitions/")
        return validate(value, SCHEMAS["definitions"][name], path)
    errors: list[str] = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(isinstance(value, _TYPES[t]) and not (t == "integer" and isinstance(value, bool)) for t in types)
        if not ok:
            return [f"{path}: expected {types}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']}")
    if isinstance(value, int) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > {schema['maximum']}")
    if isinstance(value, dict):
        errors += [f"{path}: missing '{k}'" for k in schema.get("required", []) if k not in value]
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                errors += validate(v, props[k], f"{path}.{k}")
            elif extra is False:
                errors.append(f"{path}: unknown field '{k}'")
            elif isinstance(extra, dict):
                errors += validate(v, extra, f"{path}.{k}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, v in enumerate(value):
                errors += validate(v, schema["items"], f"{path}[{i}]")
    return errors


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command/args/env values (third_party/forked/golang/expansion):
    ``$$`` -> ``$``, ``$(NAME)`` -> env[NAME] when defined (else left as written), other ``$`` kept."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env.get(name, text[i:end + 1]))
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def docs_of(text: str) -> list[dict]:
    return list(yaml.safe_load_all(text))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGEN:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"golden file {path} missing (CLUSTERTWIN_REGEN_GOLDEN=1 writes it)"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden file"


def ref_text(**kw) -> str:
    opts = DeploySpec(job_name="llama3-70b-pretrain", checkpoint_dir="/lustre/ckpt/llama3-70b",
                      checkpoint_pvc="lustre-ckpt", queue="team-llm", topology_label="network.example.com/block",
                      script="pretrain_gpt.py", script_args=("--data-path", "/lustre/data/tokens"), **kw)
    return k8s_manifests(cluster(), model(), REF_LAYOUT, opts, REF_PREDICTION)


def test_golden_manifests_reference_cluster():
    check_golden("ref-1k-h100-llama3-70b.k8s.yaml", ref_text())


def test_manifests_match_the_published_schemas():
    pj, js = docs_of(ref_text())
    assert validate(pj, SCHEMAS["definitions"]["PyTorchJob"]) == []
    assert validate(js, SCHEMAS["definitions"]["JobSet"]) == []


def test_validator_catches_a_misspelt_field():
    pj, _ = docs_of(ref_text())
    pj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resource"] = {}
    errs = validate(pj, SCHEMAS["definitions"]["PyTorchJob"])
    assert errs and "unknown field 'resource'" in errs[0]


def test_pytorchjob_shape():
    pj, _ = docs_of(ref_text())
    reps = pj["spec"]["pytorchReplicaSpecs"]
    assert reps["Master"]["replicas"] == 1 and reps["Worker"]["replicas"] == 127
    assert pj["spec"]["nprocPerNode"] == "8"
    pod = reps["Worker"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["name"] == "pytorch"
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": 1}
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NCCL_IB_HCA"].startswith("=mlx5_0:1,") and env["NCCL_NVLS_ENABLE"] == "1"
    assert pj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-llm"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for e in terms[0]["matchExpressions"]}
    assert keys == {"nvidia.com/gpu.present", "nvidia.com/gpu.count"}
    assert pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
        "podAffinityTerm"]["topologyKey"] == "network.example.com/block"
    assert c["command"][:2] == ["torchrun", "pretrain_gpt.py"]


def test_jobset_rendezvous_and_indexing():
    _, js = docs_of(ref_text())
    name = js["metadata"]["name"]
    rj = js["spec"]["replicatedJobs"][0]
    spec = rj["template"]["spec"]
    assert spec["parallelism"] == spec["completions"] == 128 and spec["completionMode"] == "Indexed"
    c = spec["template"]["spec"]["containers"][0]
    assert f"--master_addr={name}-{rj['name']}-0-0.{js['spec']['network']['subdomain']}" in c["command"]
    assert "--node_rank=$(NODE_RANK)" in c["command"] and "--nnodes=128" in c["command"]
    node_rank = next(e for e in c["env"] if e["name"] == "NODE_RANK")
    assert "job-completion-index" in node_rank["valueFrom"]["fieldRef"]["fieldPath"]
    # the last pod's hostname must fit a DNS label
    assert len(f"{name}-{rj['name']}-0-{spec['parallelism'] - 1}") <= 63


def test_cpu_variant_requests_cpus_and_no_gpu_or_rdma():
    plan = plan_job(cluster(), model("llama3-8b"), specs.ParallelismSpec(dp=4, global_batch=4),
                    DeploySpec(device="cpu", flags="none"))
    pod = pytorchjob(plan)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": 2}
    assert "hostNetwork" not in pod and "affinity" not in pod
    assert not any(e["name"].startswith("NCCL_") for e in pod["containers"][0]["env"])
    assert validate(jobset(plan), SCHEMAS["definitions"]["JobSet"]) == []


def test_hostile_strings_stay_data():
    args = (HOSTILE, "$(NODE_RANK)", "$(CHECKPOINT_DIR)", "$$", "x: y", "- item", "")
    ckpt = "ck pt/$(HOME)"
    opts = DeploySpec(job_name=HOSTILE, script="t $(id).py", script_args=args, checkpoint_dir=ckpt)
    bad_cluster = cluster().model_copy(update={"name": "c\n---\nkind: Secret"})
    text = k8s_manifests(bad_cluster, model("llama3-8b"), specs.ParallelismSpec(tp=8, dp=2, global_batch=16),
                         opts, REF_PREDICTION)
    assert "*id0" not in text and "&id0" not in text  # no YAML anchors/aliases
    docs = docs_of(text)
    assert [d["kind"] for d in docs] == ["PyTorchJob", "JobSet"]
    for doc in docs:
        assert doc["metadata"]["annotations"]["clustertwin.io/job-name"] == HOSTILE
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
        assert validate(doc, SCHEMAS["definitions"][doc["kind"]]) == []
    # what the container receives after Kubernetes expands $(VAR) against its env
    for doc in docs:
        c = (doc["spec"]["pytorchReplicaSpecs"]["Master"] if doc["kind"] == "PyTorchJob"
             else doc["spec"]["replicatedJobs"][0]["template"]["spec"])["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
        env["NODE_RANK"] = "0"
        got = [k8s_expand(x, env) for x in c["command"]]
        assert tuple(got[-len(args):]) == args
        assert opts.script in got
        assert got[got.index("--save") + 1] == ckpt
        assert k8s_expand(env["CHECKPOINT_DIR"], env) == ckpt


def test_k8s_literal_round_trips():
    for s in ("$(A)", "$$(A)", "a$b", "$", "$$$", "(x)"):
        assert k8s_expand(k8s_literal(s), {"A": "expanded"}) == s


@pytest.mark.parametrize("bad", [{"namespace": "Bad_NS"}, {"queue": "q q"}, {"checkpoint_pvc": "x/y"},
                                 {"topology_label": "a b"}, {"rdma_resource": "rdma/ x"}])
def test_bad_k8s_options_are_spec_errors(bad):
    with pytest.raises(SpecError):
        specs.build(DeploySpec, bad)


def test_cli_k8s_kind_selects_manifests(cli, tmp_path):
    out = tmp_path / "job.yaml"
    r = cli("deploy", "k8s", "--model", "llama3-8b", "--gpus", "16", "--tp", "8", "--global-batch", "64",
            "--kind", "jobset", "--queue", "team-a", "-o", str(out))
    assert r.code == 0, r.stderr
    docs = docs_of(out.read_text())
    assert [d["kind"] for d in docs] == ["JobSet"]
    assert out.read_text().startswith("# Generated by clustertwin deploy k8s")
    assert "# predicted by the twin" in out.read_text()
    r = cli("deploy", "k8s", "--model", "llama3-8b", "--global-batch", "64", "--kind", "deployment")
    assert r.code == 2 and "--kind" in r.stderr
