"""Measurement: evals, bench, reliability runs, the hostile corpus and peer baselines."""
