"""bench.pipeline's PostgreSQL database: a new name every run, so two benches on one server
(even from machines whose process ids coincide) never drop each other's database."""

from __future__ import annotations

from bench.pipeline import bench_database_name


def test_every_run_gets_its_own_database_name():
    names = {bench_database_name() for _ in range(50)}
    assert len(names) == 50
    assert all(name.startswith("hamiadmin_bench_") and name.replace("_", "").isalnum() for name in names)
