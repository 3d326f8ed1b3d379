"""Benchmarks: the engine alone (engine.py) and the pipeline on a real database (pipeline.py)."""
