"""Streaming sweep results: each finished batch is appended to the Parquet file as a row group and folded
into running status counts and Pareto fronts, so a sweep's memory stays flat whatever its size (one batch
plus the fronts), instead of holding every row until the end.

The fronts are exact: the front of A ∪ B is the front of (front(A) ∪ B), and batches arrive in point-id
order, so ties resolve to the lowest point id as :func:`clustertwin.sweep.pareto.front` does on the whole.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from clustertwin.errors import SpecError
from clustertwin.sweep.pareto import FRONTS, front
from clustertwin.sweep.schema import COLUMNS, Columns, schema, to_table


class ParquetStream:
    """A sink for evaluator column batches: ``stream(columns)`` per batch, then ``close()``. ``layout``: the
    results' columns (default the design space's); :meth:`for_space` picks layout and fronts of a space."""

    def __init__(self, path: str | Path, space_json: str | None = None,
                 fronts: dict[str, tuple[str, str]] = FRONTS, layout: Columns = COLUMNS) -> None:
        self.path = Path(path)
        self.space_json = space_json
        self.layout = layout
        self.rows = 0
        self.status: Counter[str] = Counter()
        self._front_axes = dict(fronts)
        self.fronts: dict[str, pa.Table] = {n: schema(space_json, layout).empty_table() for n in fronts}
        try:
            self._writer: Any = pq.ParquetWriter(str(self.path), schema(space_json, layout), compression="zstd")
        except OSError as e:
            raise SpecError(f"cannot write results: {e}", file=str(self.path)) from None

    def __call__(self, columns: dict[str, Any]) -> None:
        table = to_table(columns, self.space_json, self.layout)
        self._writer.write_table(table)
        self.rows += table.num_rows
        self.status.update(table["status"].to_pylist())
        for name, (x, y) in self._front_axes.items():
            self.fronts[name] = front(pa.concat_tables([self.fronts[name], table]), x, y)

    @classmethod
    def for_space(cls, path: str | Path, space: Any) -> ParquetStream:
        """The stream of a space's results: the design layout with its Pareto fronts, or a cluster space's
        layout (:data:`~clustertwin.sweep.cluster_eval.CLUSTER_COLUMNS`, no fronts)."""
        if getattr(space, "kind", "design") == "cluster":
            from clustertwin.sweep.cluster_eval import CLUSTER_COLUMNS

            return cls(path, space.model_dump_json(), fronts={}, layout=CLUSTER_COLUMNS)
        return cls(path, space.model_dump_json())

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> ParquetStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
