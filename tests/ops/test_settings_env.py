"""Settings from the environment: empty means the default, a malformed value stops start-up
naming the variable (a bad throttle rate used to make every throttled write answer 500, a bad
number stopped it with a bare `could not convert string to float`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RATE = "settings.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['token-writes']"
GRACE = "settings.HAMIADMIN['PREEMPT_GRACE_SECONDS']"


def start(
    value: str, name: str = "HAMI_THROTTLE_TOKEN_WRITES", read: str = RATE
) -> subprocess.CompletedProcess:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="hamiadmin.settings", **{name: value})
    code = f"import django; django.setup(); from django.conf import settings; print({read})"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def test_an_empty_rate_is_the_default_and_a_set_one_is_kept():
    assert start("").stdout.strip() == "600/s"
    assert start("7/min").stdout.strip() == "7/min"


def test_a_malformed_rate_stops_start_up_naming_the_variable():
    done = start("lots")
    assert done.returncode != 0
    assert "HAMI_THROTTLE_TOKEN_WRITES must look like 600/s" in done.stderr


def test_numbers_read_the_same_way():
    assert start("", "HAMI_PREEMPT_GRACE_SECONDS", GRACE).stdout.strip() == "120.0"
    assert start("45", "HAMI_PREEMPT_GRACE_SECONDS", GRACE).stdout.strip() == "45.0"
    done = start("soon", "HAMI_PREEMPT_GRACE_SECONDS", GRACE)
    assert done.returncode != 0
    assert "HAMI_PREEMPT_GRACE_SECONDS must be a number, got 'soon'" in done.stderr
    done = start("1.5", "HAMI_CYCLE_MAX_PODS", "settings.HAMIADMIN['CYCLE_MAX_PODS']")
    assert "HAMI_CYCLE_MAX_PODS must be a whole number, got '1.5'" in done.stderr


def test_a_web_process_freezes_what_it_loaded_unless_told_not_to():
    """`hamiadmin.wsgi`: the application and its URLconf loaded, then frozen out of the
    collector's sweeps (HAMI_GC_FREEZE)."""

    def frozen(value: str | None) -> tuple[int, bool]:
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="hamiadmin.settings")
        env.pop("HAMI_GC_FREEZE", None)
        if value is not None:
            env["HAMI_GC_FREEZE"] = value
        code = "import gc, sys, hamiadmin.wsgi; print(gc.get_freeze_count(), 'hamiadmin.urls' in sys.modules)"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        count, loaded = done.stdout.split()
        return int(count), loaded == "True"

    count, loaded = frozen(None)
    assert count > 10_000 and loaded  # the modules, classes and URL patterns
    assert frozen("false") == (0, False)  # and the URLconf at the first request
