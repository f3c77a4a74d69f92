"""Calibration files from node measurements (``node bench --calibration-out``)."""
