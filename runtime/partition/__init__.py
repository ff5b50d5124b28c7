"""Splitting one launch across devices: safety, advisor, calibration, execution, route policy."""
