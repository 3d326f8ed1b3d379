"""Throttle rates from the environment: empty means the default, a malformed one stops
start-up naming the variable (it used to make every throttled write answer 500)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
READ = "import django; django.setup(); from django.conf import settings; print(settings.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['token-writes'])"


def start(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="hamiadmin.settings", HAMI_THROTTLE_TOKEN_WRITES=value)
    return subprocess.run(
        [sys.executable, "-c", READ], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def test_an_empty_rate_is_the_default_and_a_set_one_is_kept():
    assert start("").stdout.strip() == "600/s"
    assert start("7/min").stdout.strip() == "7/min"


def test_a_malformed_rate_stops_start_up_naming_the_variable():
    done = start("lots")
    assert done.returncode != 0
    assert "HAMI_THROTTLE_TOKEN_WRITES must look like 600/s" in done.stderr
