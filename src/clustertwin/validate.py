"""Predictions vs measured cases (``clustertwin validate``).

A case file holds one case or a list under ``cases:`` (format: validation/README.md of the shared data).
Each kind is evaluated by ``evaluate(case) -> dict`` in its layer's ``validation`` module, so this module
depends on every layer but no layer depends on it. A case that cannot be evaluated is reported with an
``error`` and counted in ``summary.failed``; it never aborts the run. A file that holds no cases (empty, an
empty ``cases:`` list, or a misspelt top-level key such as ``casess:``), a directory without case files, an
unknown ``--kind`` or a ``--kind`` that leaves no case is a SpecError (exit 2) naming the file or option; cases
left out by ``--kind`` are counted in ``summary.skipped`` by kind.
"""

from __future__ import annotations

import importlib
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustertwin import inputs
from clustertwin.errors import ClusterTwinError, SpecError, did_you_mean
from clustertwin.safety import one_line

#: case kind -> "module:function" evaluating it
EVALUATORS: dict[str, str] = {
    "collective": "clustertwin.comm.validation:evaluate",
    "train": "clustertwin.train.validation:evaluate",
    "train_run": "clustertwin.train.validation:evaluate_run",
    "infer": "clustertwin.infer.validation:evaluate",
    "reliability": "clustertwin.reliability.validation:evaluate",
    "hpl": "clustertwin.hpc.validation:evaluate",
    "data_loading": "clustertwin.datapath.validation:evaluate",
    "gemm": "clustertwin.train.gemm_validation:evaluate",
    "interference": "clustertwin.sched.interference_cases:evaluate",
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
    calibration: bool = False
    """The case defines model constants (``calibration: true`` in the case file), so its error is not a test."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "kind": self.kind, "source": self.source,
                             "measured": self.measured}
        if self.calibration:
            d["calibration"] = True
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


@dataclass(frozen=True)
class BadEntry:
    """A case file or entry that cannot be read: listed and counted as a failed case."""

    error: SpecError
    id: str | None = None
    kind: str = "?"


CASE_KEYS = ("kind", "id", "measured")
"""Keys that make a top-level mapping one case (evaluated, and failed if ``kind`` is missing)."""


def _cases_of(doc: Any, file: str) -> Any:
    """The entries of a case document; a document that holds no cases is a SpecError naming the file (and,
    for a misspelt top-level key, the key and its nearest valid name)."""
    if doc is None:
        raise SpecError("holds no cases (the file is empty)", file=file)
    if not isinstance(doc, dict):
        cases, where = doc, ()
    elif "cases" in doc:
        cases, where = doc["cases"], ("cases",)
    elif any(k in doc for k in CASE_KEYS):
        return [doc]
    else:
        for key in map(str, doc):
            hint = did_you_mean(key, ["cases"])
            if hint:
                raise SpecError(f"holds no cases: unknown key '{one_line(key)[:60]}'{hint}", file=file)
        raise SpecError("holds no cases: expected a list under 'cases:' or one case with 'kind:'", file=file)
    if isinstance(cases, list) and not cases:
        raise SpecError("holds no cases (the list is empty)", file=file, path=where)
    return cases


def iter_cases(paths: Iterable[str | Path]) -> Iterator[tuple[str, int, dict | BadEntry]]:
    """(file, index, case) for every case in the files (directories expand to their *.yaml). A file or an
    entry that cannot be read yields a :class:`BadEntry` in place of the case, so the run lists and counts it;
    a file or directory that holds no cases is a SpecError (:func:`_cases_of`)."""
    for p in paths:
        path = Path(p)
        if not path.exists():  # a mistyped argument is a usage error (exit 2), not a failed case
            raise SpecError("file not found", file=str(path))
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        if not files:
            raise SpecError("directory holds no *.yaml case files", file=str(path))
        for f in files:
            try:
                doc = inputs.read_document(f, limits=False)  # limits per case below: one bad case, one failure
            except SpecError as e:
                yield str(f), 0, BadEntry(e)
                continue
            cases = _cases_of(doc, str(f))
            if not isinstance(cases, list):
                yield str(f), 0, BadEntry(SpecError("expected a case or a list under 'cases:'", file=str(f)))
                continue
            for i, c in enumerate(cases):
                if not isinstance(c, dict):
                    yield str(f), i, BadEntry(SpecError("expected a mapping", file=str(f), path=("cases", i)))
                    continue
                try:
                    inputs.check_tree(c, str(f))
                except SpecError as e:
                    yield str(f), i, BadEntry(e.with_context(prefix=("cases", i)), one_line(c.get("id", "")) or None,
                                              one_line(c.get("kind", "?")))
                    continue
                yield str(f), i, c


def rel_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured."""
    return (predicted - measured) / measured


def _value(v: Any, what: str, key: str) -> float:
    """A measured (> 0) or predicted (>= 0) value as a finite float; anything else fails the case."""
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(f"{what} '{key}' is not a number (got {str(v)[:40]!r})") from None
    if not math.isfinite(x) or x < 0 or (what == "measured" and x == 0):
        bound = "> 0" if what == "measured" else ">= 0"
        raise SpecError(f"{what} '{key}' must be a finite number {bound} (got {x:g})")
    return x


def evaluate_case(case: dict, file: str | None = None) -> CaseResult:
    """Evaluate one case; any failure (bad input, a model error, a negative/NaN/inf predicted or measured
    value) becomes ``error`` on the result, never an exception."""
    raw = case.get("measured")
    measured = dict(raw) if isinstance(raw, dict) else {}
    res = CaseResult(id=str(case.get("id", "?")), kind=str(case.get("kind", "?")),
                     source=str(case.get("source", "")), measured=measured, file=file,
                     calibration=case.get("calibration") is True)
    try:
        if "kind" not in case:
            near = [str(k) for k in case if k not in CASE_KEYS and did_you_mean(str(k), ["kind"])]
            hint = f"; unknown key '{one_line(near[0])[:60]}', did you mean 'kind'?" if near else ""
            raise SpecError(f"missing 'kind:' (one of {', '.join(EVALUATORS)}){hint}")
        if raw is not None and not isinstance(raw, dict):
            raise SpecError(f"'measured' must be a mapping of quantity: value (got {type(raw).__name__})")
        checked = {k: _value(m, "measured", k) for k, m in measured.items()}
        pred = evaluator(res.kind)(case)
        res.predicted = pred
        for k, m in checked.items():
            if k not in pred:
                raise SpecError(f"no prediction for measured key '{k}'")
            res.rel_error[k] = rel_error(_value(pred[k], "predicted", k), m)
    except ClusterTwinError as e:
        res.error = one_line(e)
    except RecursionError:
        res.error = "RecursionError: case nested too deeply"
    except Exception as e:  # a model failure on this case is reported with the case, never aborts the run
        res.error = one_line(f"{type(e).__name__}: {e}")
    if res.error is not None:
        res.rel_error = {}
    return res


def _stats(results: list[CaseResult]) -> dict[str, Any]:
    errs = [abs(v) for r in results if r.error is None for v in r.rel_error.values()]
    return {
        "count": len(results),
        "failed": sum(r.error is not None for r in results),
        "median_abs_rel_error": statistics.median(errs) if errs else None,
        "mean_abs_rel_error": statistics.fmean(errs) if errs else None,
        "max_abs_rel_error": max(errs) if errs else None,
        "calibration": sum(r.calibration for r in results),
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
    """Evaluate every case in ``paths`` (optionally only some kinds): ``{"cases": [...], "summary": {...}}``;
    cases of other kinds are counted in ``summary.skipped`` / ``summary.skipped_by_kind``, never dropped."""
    for k in sorted(kinds or ()):
        if k not in EVALUATORS:
            raise SpecError(f"--kind: unknown case kind '{one_line(k)[:60]}'{did_you_mean(k, EVALUATORS)} "
                            f"(choose from {', '.join(EVALUATORS)})")
    results: list[CaseResult] = []
    skipped: Counter[str] = Counter()
    for file, i, case in iter_cases(paths):
        if isinstance(case, BadEntry):  # unreadable file or entry: listed and counted as failed
            results.append(CaseResult(id=case.id or f"{Path(file).name}#{i}", kind=case.kind, source="",
                                      measured={}, error=one_line(case.error), file=file))
        elif kinds and case.get("kind") not in kinds:
            skipped[one_line(case.get("kind", "?"))[:60]] += 1
            continue
        else:
            results.append(evaluate_case(case, file))
        if progress:
            progress(len(results))
    if not results:
        raise SpecError(f"--kind {','.join(sorted(kinds or ()))}: no case of that kind in the files "
                        f"({sum(skipped.values())} skipped: {_counts(skipped)})" if kinds else "no cases to evaluate")
    summary = summarize(results)
    summary["skipped"] = sum(skipped.values())
    summary["skipped_by_kind"] = dict(sorted(skipped.items()))
    return {"cases": [r.to_dict() for r in results], "summary": summary, "_results": results}


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(c.items())) or "none"
