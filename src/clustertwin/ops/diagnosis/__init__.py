"""Diagnosis of a failed job's logs: findings, incidents, OOM advice (``diagnose``)."""
