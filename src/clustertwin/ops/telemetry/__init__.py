"""Telemetry: the Prometheus exporters and their alert rules (``exporter``)."""
