"""Catalog, example and doc sources cite the public source itself, never an internal note name."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT

SHIPPED = [*sorted((ROOT / "src" / "clustertwin" / "catalog" / "data").glob("*.yaml")),
           *sorted((ROOT / "examples").rglob("*.yaml")), *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
           *sorted((ROOT / "validation").glob("*.yaml")), *sorted((ROOT / "src").rglob("*.py")),
           *sorted(p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_public_sources.py")]


def test_no_shipped_source_names_an_internal_note() -> None:
    leaks = [f"{p.relative_to(ROOT)}:{i}" for p in SHIPPED for i, line in enumerate(Path(p).read_text().splitlines(), 1)
             if "_anchors" in line and "YAML anchors" not in line]
    assert len(SHIPPED) > 20 and not leaks, leaks
