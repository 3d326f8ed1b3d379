"""`manage.py simulate` pauses the cyclic garbage collector while it runs (issue 18: most of
its collections walked a heap of live objects and freed nothing); it must put it back as it
found it, since tests and the shell run the command in a process that goes on."""

from __future__ import annotations

import gc
import json

import pytest
from django.core.management import call_command

from bench.engine import synthetic_nodes, synthetic_pods


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was(tmp_path, capsys, enabled):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"nodes": synthetic_nodes(3), "pods": synthetic_pods(5)}))
    (gc.enable if enabled else gc.disable)()
    try:
        call_command("simulate", str(path), "--indent", "0")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    assert len(json.loads(capsys.readouterr().out)["pods"]) == 5


def test_a_malformed_file_still_puts_it_back(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"nodes": [{"name": "a", "devices": [{"uuid": "G"}]}], "pods": []}))
    gc.enable()
    with pytest.raises(SystemExit):
        call_command("simulate", str(path))
    assert gc.isenabled()
