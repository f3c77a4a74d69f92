"""Generated files take valid strings only (issue 28): HCA and interface lists, images and Kubernetes names are
checked against their grammars (src/clustertwin/deploy/grammars.py) at the input layer, so `deploy slurm|k8s`
either writes a file whose every such value matches its grammar or exits 2 with one line naming the option."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, seed
from hypothesis import strategies as st

from clustertwin.deploy import grammars as g
from tests.fuzz.harness import fuzz_settings, run

DEPLOY = ("--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--global-batch", "128", "--no-predict")
LONG = "a" * 100_000

VALID = {
    g.extended_resource: ["rdma/rdma_shared_device_a", "nvidia.com/gpu", "rdma/hca_shared_devices_a",
                          "example.com/a.b-c_d", "a" * 244 + "/" + "b" * 63],
    g.label_key: ["topology.kubernetes.io/zone", "network-block", "example.com/rack", "a" * 63],
    g.image_reference: ["nvcr.io/nvidia/pytorch:25.01-py3", "ubuntu", "ubuntu:22.04", "localhost:5000/a/b",
                        "[::1]:5000/x:y", "a__b/c-d---e.f", "ghcr.io/org/img@sha256:" + "0" * 64,
                        "docker.io/library/busybox:1.36@sha256:" + "f" * 64],
    g.pyxis_image: ["nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io#nvidia/pytorch:25.01-py3",
                    "user@nvcr.io#nvidia/pytorch", "/lustre/images/pytorch.sqsh", "./pytorch.sqsh"],
    g.socket_ifname: ["^lo,docker,veth", "eth0", "=eth0", "^=ib0,ib1", "enp1s0f0np0", "a" * 15, "bond0.100"],
    g.ib_hca: ["=mlx5_0:1,mlx5_1:1", "mlx5", "^mlx5_3", "mlx5_bond_0", "^=mlx5_0:1", "irdma0", "mlx5_0:255"],
}
INVALID = {
    g.extended_resource: ["rdma/" + LONG, "gpu", "kubernetes.io/x", "requests.x/y", "Rdma/x", "rdma/ x",
                          "a/b/c", "x/" + "a" * 64, "a" * 245 + "/x", "rdma/-x", "/x", "rdma/"],
    g.label_key: ["a b", "a" * 64, "x/" + LONG, "-a", "A_B/c", "a/b/c"],
    g.image_reference: ["Ubuntu", "nvcr.io/nvidia/pytorch:25.01-py3;touch PWNED", "a b", "", "a:" + "x" * 200,
                        "-a", "a/" + "b" * 300, "x@sha256:abc", "a//b", "a_", "a:", LONG, "a\nb", "$(id)"],
    g.pyxis_image: ["x;y", "/a b", "nvcr.io#Nvidia", "./" + "a" * 5000, "", "-x"],
    g.socket_ifname: ["eth0:1", "a" * 16, "e th", "..", ".", "eth0,,eth1", "^", "=", "a/b", "\u00e4", "e\x1b",
                      ",".join(["e"] * 33), LONG, ""],
    g.ib_hca: ["mlx5_0:0", "mlx5_0:256", "mlx5_0:1:2", "x" * 64, "mlx5 0", "-mlx", "mlx5_0;id", LONG, "", "^"],
}


@pytest.mark.parametrize("check,value", [(c, v) for c, vs in VALID.items() for v in vs],
                         ids=lambda x: getattr(x, "__name__", str(x)[:30]))
def test_grammar_accepts(check, value: str) -> None:
    assert check(value) == value


@pytest.mark.parametrize("check,value", [(c, v) for c, vs in INVALID.items() for v in vs],
                         ids=lambda x: getattr(x, "__name__", repr(x)[:30]))
def test_grammar_refuses_with_a_short_reason(check, value: str) -> None:
    with pytest.raises(ValueError) as e:
        check(value)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400  # a 100,000-character value is not echoed


@pytest.mark.parametrize("check", list(VALID))
def test_grammars_are_fast_on_adversarial_input(check) -> None:
    t = time.process_time()
    for v in ("a" * 1000 + "!", "a-" * 500 + "!", "a." * 500 + "!", "a" * 255 + "." + "a" * 700 + "!", LONG,
              "[" + ":" * 1000, "a__" * 300 + "_", "a#" * 500):
        with contextlib.suppress(ValueError):
            check(v)
    assert time.process_time() - t < 0.5


CLI = [
    ("k8s", "--rdma-resource", "rdma/" + LONG), ("k8s", "--rdma-resource", "gpu"),
    ("k8s", "--rdma-resource", "kubernetes.io/rdma"), ("k8s", "--container-image", "Bad Image"),
    ("k8s", "--container-image", "nvcr.io/nvidia/pytorch:25.01-py3\nkind: Secret"), ("k8s", "--container-image", LONG),
    ("k8s", "--topology-label", "a" * 300), ("slurm", "--ib-hca", "mlx5_0:1;touch PWNED"),
    ("slurm", "--ib-hca", "=mlx5_0:1," + LONG), ("k8s", "--ib-hca", "mlx5_0:999"),
    ("slurm", "--socket-ifname", "eth0:1"), ("k8s", "--socket-ifname", "^lo,,docker"),
    ("slurm", "--socket-ifname", "a" * 16), ("slurm", "--container-image", "x;y"),
    ("slurm", "--container-image", "/images/a b.sqsh"),
]


@pytest.mark.parametrize("kind,opt,value", CLI, ids=[f"{k} {o} {v[:20]!r}" for k, o, v in CLI])
def test_cli_refuses_naming_the_option(tmp_path: Path, kind: str, opt: str, value: str) -> None:
    out = tmp_path / "job.out"
    r = run("deploy grammars", "deploy", kind, *DEPLOY, opt, value, "-o", str(out))
    assert r.code == 2 and not out.exists() and r.stdout == ""
    assert r.stderr.startswith(f"error: {opt}: ") and len(r.stderr.splitlines()) == 1, r.stderr


def test_valid_values_reach_the_files_verbatim(tmp_path: Path) -> None:
    sb = tmp_path / "job.sbatch"
    r = run("deploy grammars", "deploy", "slurm", *DEPLOY, "--ib-hca", "^=mlx5_4:1,mlx5_5", "--socket-ifname",
            "=bond0", "--container-image", "nvcr.io#nvidia/pytorch:25.01-py3", "-o", str(sb))
    assert r.code == 0, r.stderr
    text = sb.read_text(encoding="utf-8")
    assert "NCCL_IB_HCA='^=mlx5_4:1,mlx5_5'" in text and "NCCL_SOCKET_IFNAME='=bond0'" in text
    assert "--container-image='nvcr.io#nvidia/pytorch:25.01-py3'" in text
    mf = tmp_path / "job.yaml"
    r = run("deploy grammars", "deploy", "k8s", *DEPLOY, "--rdma-resource", "rdma/hca_shared_devices_a",
            "--image", "ghcr.io/org/train:v1", "--topology-label", "network.example.com/block", "-o", str(mf))
    assert r.code == 0, r.stderr
    for doc in (d for d in yaml.safe_load_all(mf.read_text(encoding="utf-8")) if d is not None):
        for c in _containers(doc):
            assert c["image"] == "ghcr.io/org/train:v1"
            assert c["resources"]["limits"]["rdma/hca_shared_devices_a"] == 1


def _containers(doc: object):
    """Every container spec in a manifest (any dict with ``image`` and ``resources``)."""
    if isinstance(doc, dict):
        if "image" in doc and "resources" in doc:
            yield doc
        for v in doc.values():
            yield from _containers(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _containers(v)


PIECES = ["a", "Z", "9", "_", "-", ".", "/", ":", "@", "#", "^", "=", ",", " ", "\n", "$", ";", "\x00", "\u2028",
          "mlx5_0", "eth0", "nvcr.io", "sha256:" + "0" * 32, "a" * 70]
texts = st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map("".join)
OPTS = {"--rdma-resource": g.extended_resource, "--container-image": g.image_reference, "--topology-label": g.label_key,
        "--ib-hca": g.ib_hca, "--socket-ifname": g.socket_ifname}


@seed(28)
@fuzz_settings(40)
@given(opt=st.sampled_from(sorted(OPTS)), text=texts)
def test_manifest_holds_only_grammatical_values(tmp_path_factory, opt: str, text: str) -> None:
    """Whatever the value, the run is exit 2 naming the option, or the manifest holds it and it matches."""
    out = tmp_path_factory.getbasetemp() / "grammar.yaml"
    out.unlink(missing_ok=True)
    r = run("deploy grammars", "deploy", "k8s", *DEPLOY, opt, text, "-o", str(out))
    if r.code == 2:
        assert r.stderr.startswith(f"error: {opt}: ") or text.startswith("-"), r.stderr
        return
    assert OPTS[opt](text) == text  # accepted only if grammatical
    docs = [d for d in yaml.safe_load_all(out.read_text(encoding="utf-8")) if d is not None]
    for c in (c for d in docs for c in _containers(d)):
        g.image_reference(c["image"])
        for key in c["resources"]["limits"]:
            if "/" in key:
                g.extended_resource(key)
