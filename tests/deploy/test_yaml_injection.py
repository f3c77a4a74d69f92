"""Generated manifests stay one YAML document with the expected keys, whatever the user's strings hold.

U+2028/U+2029, U+0085 and every C0/C1 control are line breaks to some YAML parser; a name carrying them once
smuggled a second document (a kube-system Secret) into `deploy k8s` output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.conftest import run_cli

BREAKS = ["\u2028", "\u2029", "\u0085", "\n", "\r", "\x0b", "\x0c", "\x1b", "\x9b", "\x00"]
PAYLOAD = ("x{b}apiVersion: v1{b}kind: Secret{b}metadata: {{name: pwn, namespace: kube-system}}{b}"
           "stringData: {{token: stolen}}{b}---{b}#")


def _write_model(tmp: Path, brk: str) -> Path:
    p = tmp / "evil.yaml"
    name = PAYLOAD.format(b=brk)
    p.write_text(yaml.safe_dump({"preset": "llama3-8b", "name": name}, allow_unicode=True), encoding="utf-8")
    return p


@pytest.mark.parametrize("brk", BREAKS, ids=[f"U+{ord(b):04X}" for b in BREAKS])
def test_model_name_cannot_inject_a_document(tmp_path: Path, brk: str) -> None:
    model = _write_model(tmp_path, brk)
    out = tmp_path / "out.yaml"
    r = run_cli("deploy", "k8s", "--model", str(model), "--gpus", "16", "--tp", "2", "--global-batch", "128",
                "-o", str(out))
    assert r.code == 0, r.stderr
    text = out.read_text(encoding="utf-8")
    for ch in BREAKS[:3]:
        assert ch not in text
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    kinds = [d.get("kind") for d in docs]
    assert "Secret" not in kinds
    assert all(set(d) <= {"apiVersion", "kind", "metadata", "spec"} for d in docs), [sorted(d) for d in docs]


def test_trailing_newline_in_partition_is_rejected() -> None:
    r = run_cli("deploy", "slurm", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--global-batch", "128",
                "--partition", "gpu\n")
    assert r.code == 2
    assert "partition" in r.stderr.lower()
