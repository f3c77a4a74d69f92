"""Specs: preset resolution, inline overrides and one-line errors for each bad-input class."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from clustertwin import catalog, specs
from clustertwin.errors import SpecError


def test_reference_cluster_resolves_presets():
    c = catalog.get("cluster", "ref-1k-h100")
    assert c.total_gpus == 1024
    assert c.node.gpu.id == "h100-sxm"
    assert c.net.fabric.gbit_per_s == 400
    assert c.node.scale_up_gb_per_s == 450


def test_inline_override_of_a_preset():
    c = specs.load(specs.ClusterSpec, {"node": {"preset": "dgx-h100", "gpus": 4}, "nodes": 3})
    assert c.node.gpus == 4 and c.node.gpu.id == "h100-sxm" and c.total_gpus == 12


def test_specs_are_frozen():
    c = catalog.get("cluster", "ref-1k-h100")
    with pytest.raises(ValidationError):
        c.nodes = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        ({"node": {"preset": "dgx-h100", "gpu": "h100-smx"}}, "node.gpu", "did you mean 'h100-sxm'"),
        ({"node": "dgx-h100", "network": {"fabrik": "ib-ndr"}}, "network.fabrik", "did you mean 'fabric'"),
        ({"node": "dgx-h100", "nodes": 0}, "nodes", "greater than 0"),
        ({"node": "dgx-h100", "nodes": "many"}, "nodes", "valid integer"),
        ({"node": "dgx-h100", "nodes": 2, "gpus": 17}, "gpus", "expected nodes x node.gpus"),
    ],
)
def test_bad_input_names_field_and_expectation(data, path, fragment):
    with pytest.raises(SpecError) as ei:
        specs.load(specs.ClusterSpec, data)
    msg = str(ei.value)
    assert fragment in msg
    assert path in msg
    assert "\n" not in msg


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("node: dgx-h100\nnodes: [1, 2\n")
    with pytest.raises(SpecError) as ei:
        specs.load(specs.ClusterSpec, f)
    assert "bad.yaml" in str(ei.value) and "line" in str(ei.value)


def test_unknown_catalog_id_suggests_nearest():
    with pytest.raises(SpecError) as ei:
        catalog.get("gpu", "h100-smx")
    assert "h100-sxm" in str(ei.value)


def test_hidden_not_divisible_by_heads_needs_head_dim(cli, tmp_path) -> None:
    """A width the heads cannot split (found by the fuzz suite: `hidden: true` became 1 and divided by zero)."""
    f = tmp_path / "m.yaml"
    f.write_text("preset: llama3-8b\nhidden: 1\n")
    r = cli("train", "estimate", "--gpus", "8", "-b", "16", "--tp", "8", "-m", str(f))
    assert r.code == 2 and "head_dim" in r.stderr and len(r.stderr.strip().splitlines()) == 1
