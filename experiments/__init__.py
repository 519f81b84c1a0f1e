"""Experiments: tables of training runs with held-out test evaluation (see runner.py)."""
