"""Real operations, by job: node checks (``health``), benchmarks (``perf``), log diagnosis
(``diagnosis``), exporters and alerts (``telemetry``), calibration files (``calibration``); ``findings`` is
the finding type they share."""
