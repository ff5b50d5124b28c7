"""Judging the projection: our benchmark apps and third-party suites against measured device times."""
