"""Predictions vs measured cases (``clustertwin validate``).

A case file holds one case or a list under ``cases:`` (format: validation/README.md of the shared data).
Each kind is evaluated by ``evaluate(case) -> dict`` in its layer's ``validation`` module, so this module
depends on every layer but no layer depends on it. A case that cannot be evaluated is reported with an
``error`` and counted in ``summary.failed``; it never aborts the run.
"""

from __future__ import annotations

import importlib
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustertwin.errors import ClusterTwinError, SpecError, did_you_mean
from clustertwin.specs.loading import read_document

#: case kind -> "module:function" evaluating it
EVALUATORS: dict[str, str] = {
    "collective": "clustertwin.comm.validation:evaluate",
    "train": "clustertwin.train.validation:evaluate",
    "train_run": "clustertwin.train.validation:evaluate_run",
    "infer": "clustertwin.infer.validation:evaluate",
    "reliability": "clustertwin.reliability.validation:evaluate",
    "hpl": "clustertwin.hpc.validation:evaluate",
}


@dataclass
class CaseResult:
    """One evaluated case."""

    id: str
    kind: str
    source: str
    measured: dict[str, float]
    predicted: dict[str, Any] = field(default_factory=dict)
    rel_error: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "kind": self.kind, "source": self.source,
                             "measured": self.measured}
        if self.error is not None:
            d["error"] = self.error
        else:
            d["predicted"] = self.predicted
            d["rel_error"] = self.rel_error
        return d


def evaluator(kind: str) -> Callable[[dict], dict]:
    if kind not in EVALUATORS:
        raise SpecError(f"unknown case kind '{kind}'{did_you_mean(kind, EVALUATORS)}")
    mod_name, fn = EVALUATORS[kind].split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise SpecError(f"case kind '{kind}' cannot be evaluated: {e}") from None
    return getattr(mod, fn)


def iter_cases(paths: Iterable[str | Path]) -> Iterator[tuple[str, int, dict]]:
    """(file, index, case) for every case in the files (directories expand to their *.yaml)."""
    for p in paths:
        path = Path(p)
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for f in files:
            doc = read_document(f)
            cases = doc.get("cases", [doc]) if isinstance(doc, dict) else doc
            if not isinstance(cases, list):
                raise SpecError("expected a case or a list under 'cases:'", file=str(f))
            for i, c in enumerate(cases):
                if not isinstance(c, dict):
                    raise SpecError("expected a mapping", file=str(f), path=("cases", i))
                yield str(f), i, c


def rel_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured."""
    return (predicted - measured) / measured


def evaluate_case(case: dict, file: str | None = None) -> CaseResult:
    measured = dict(case.get("measured") or {})
    res = CaseResult(id=str(case.get("id", "?")), kind=str(case.get("kind", "?")),
                     source=str(case.get("source", "")), measured=measured, file=file)
    try:
        pred = evaluator(res.kind)(case)
        res.predicted = pred
        for k, m in measured.items():
            if k not in pred:
                raise SpecError(f"no prediction for measured key '{k}'")
            res.rel_error[k] = rel_error(float(pred[k]), float(m))
    except ClusterTwinError as e:
        res.error = str(e)
    except (ValueError, ZeroDivisionError, KeyError, TypeError) as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


def _stats(results: list[CaseResult]) -> dict[str, Any]:
    errs = [abs(v) for r in results if r.error is None for v in r.rel_error.values()]
    return {
        "count": len(results),
        "failed": sum(r.error is not None for r in results),
        "median_abs_rel_error": statistics.median(errs) if errs else None,
        "mean_abs_rel_error": statistics.fmean(errs) if errs else None,
        "max_abs_rel_error": max(errs) if errs else None,
    }


def summarize(results: list[CaseResult]) -> dict[str, Any]:
    summary = _stats(results)
    kinds = sorted({r.kind for r in results})
    summary["by_kind"] = {k: _stats([r for r in results if r.kind == k]) for k in kinds}
    files = sorted({r.file for r in results if r.file}, key=lambda f: Path(f).name)
    summary["by_file"] = {Path(f).name: _stats([r for r in results if r.file == f]) for f in files}
    return summary


def default_paths() -> list[Path]:
    """The calibration cases ``clustertwin validate`` runs with no argument: ``./validation`` when it holds case
    files, else the ``validation/`` folder of the source checkout this package runs from."""
    for folder in (Path.cwd() / "validation", Path(__file__).resolve().parents[2] / "validation"):
        if folder.is_dir() and any(folder.glob("*.yaml")):
            return [folder]
    raise SpecError("no validation/ folder here or beside the package; pass case files or directories",
                    file="validation/")


def run(paths: Iterable[str | Path], kinds: set[str] | None = None,
        progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Evaluate every case in ``paths`` (optionally only some kinds): ``{"cases": [...], "summary": {...}}``."""
    results: list[CaseResult] = []
    for file, _i, case in iter_cases(paths):
        if kinds and case.get("kind") not in kinds:
            continue
        results.append(evaluate_case(case, file))
        if progress:
            progress(len(results))
    return {"cases": [r.to_dict() for r in results], "summary": summarize(results), "_results": results}
