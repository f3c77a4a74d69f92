"""Every bad-input class through the CLI: exit code 2, one line on stderr naming the file and the
field (the line for YAML syntax errors), never a traceback."""

from __future__ import annotations

import pytest
from tests.conftest import run_cli

CASES = [
    # (id, file text, fragments the single error line must contain)
    ("yaml-syntax", "node: dgx-h100\nnodes: [1, 2\n", ["invalid YAML", "line 3"]),
    ("unknown-key", "node: dgx-h100\nnodez: 4\n", ["nodez", "did you mean 'node'"]),
    ("unknown-nested-key", "node: dgx-h100\nnetwork: {fabrik: ib-ndr}\n",
     ["network.fabrik", "did you mean 'fabric'"]),
    ("wrong-type", "node: dgx-h100\nnodes: many\n", ["nodes:", "valid integer", "'many'"]),
    ("wrong-type-float", "node: dgx-h100\nnodes: 2\nfacility: {pue: high}\n", ["facility.pue", "valid number"]),
    ("unknown-preset", "node: {preset: dgx-h100, gpu: h100-smx}\nnodes: 2\n",
     ["node.gpu", "unknown gpu 'h100-smx'", "did you mean 'h100-sxm'"]),
    ("unknown-node-preset", "node: dgx-h10\nnodes: 2\n", ["node", "unknown node 'dgx-h10'", "did you mean"]),
    ("zero-nodes", "node: dgx-h100\nnodes: 0\n", ["nodes:", "greater than 0"]),
    ("negative-nodes", "node: dgx-h100\nnodes: -4\n", ["nodes:", "greater than 0", "-4"]),
    ("zero-gpus-per-node", "node: {preset: dgx-h100, gpus: 0}\nnodes: 2\n", ["node.gpus", "greater than 0"]),
    ("negative-rack-limit", "node: dgx-h100\nfacility: {rack_kw_limit: -5}\n",
     ["facility.rack_kw_limit", "greater than 0"]),
    ("gpus-not-divisible", "node: dgx-h100\nnodes: 128\ngpus: 1000\n",
     ["gpus", "got 1000", "nodes x node.gpus", "1024"]),
]


@pytest.mark.parametrize(("text", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_cluster_file_exits_2_with_one_line(tmp_path, text, fragments):
    f = tmp_path / "bad_cluster.yaml"
    f.write_text(text)
    r = run_cli("plan", str(f))
    assert r.code == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert "Traceback" not in r.stderr
    assert "bad_cluster.yaml" in line
    for frag in fragments:
        assert frag in line


def test_bad_compare_file_is_named(tmp_path):
    f = tmp_path / "other.yaml"
    f.write_text("node: dgx-h100\nnodes: 0\n")
    r = run_cli("plan", "ref-1k-h100", "--compare", str(f))
    assert r.code == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "other.yaml" in r.stderr and "nodes" in r.stderr


def test_json_cluster_file_with_syntax_error(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('{"node": "dgx-h100", "nodes": }')
    r = run_cli("plan", str(f), "--json")
    assert r.code == 2 and r.stdout == ""
    assert "bad.json" in r.stderr and "invalid JSON" in r.stderr and "Traceback" not in r.stderr


def test_missing_file_and_unknown_cluster_id():
    r = run_cli("plan", "no/such/cluster.yaml")
    assert r.code == 2 and "cluster.yaml" in r.stderr and "not found" in r.stderr
    r = run_cli("plan", "ref-1k-h10")
    assert r.code == 2
    assert "unknown cluster 'ref-1k-h10'" in r.stderr and "did you mean 'ref-1k-h100'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_unknown_option_is_a_usage_error_without_traceback():
    r = run_cli("plan", "--bogus")
    assert r.code == 2
    assert "No such option" in r.stderr and "Traceback" not in r.stderr
