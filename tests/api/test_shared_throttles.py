"""The token-writes and login rate limits count in the shared cache: processes that share
Redis share the count, concurrent ones lose none, and a cache that fails lets requests
through."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.cache.backends.redis import RedisCache
from django.test import RequestFactory
from rest_framework.throttling import SimpleRateThrottle

from scheduling.api.throttles import LoginThrottle

REPO = Path(__file__).resolve().parents[2]
ADDRESS = "10.9.8.7"
SIGN_INS = (
    "import os, time; from django.test import RequestFactory; "
    "time.sleep(max(0.0, float(os.environ.get('START_AT', 0)) - time.time())); "
    "from scheduling.api.throttles import LoginThrottle; "
    "form = lambda: RequestFactory().post('/accounts/login/', REMOTE_ADDR=os.environ['ADDRESS']); "
    "print('allowed', sum(LoginThrottle().allow_request(form(), None) for _ in range(int(os.environ['TRIES']))))"
)


def sign_ins_elsewhere(tries: int, rate: str, start_at: float = 0.0) -> subprocess.Popen:
    """Another Django process sending `tries` sign-in forms from ADDRESS through LoginThrottle
    (from `start_at`, a time.time(), once Django is up)."""
    env = dict(
        os.environ, HAMI_THROTTLE_LOGIN=rate, TRIES=str(tries), ADDRESS=ADDRESS, START_AT=str(start_at)
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", SIGN_INS],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def allowed(process: subprocess.Popen) -> int:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return int(out.split("allowed", 1)[1])


def sign_in_form():
    return RequestFactory().post("/accounts/login/", REMOTE_ADDR=ADDRESS)


def test_two_processes_share_the_sign_in_count(redis_url, monkeypatch):
    """3/min: another process signs in 3 times, so this process's first form is refused."""
    monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, "login", "3/min")
    assert allowed(sign_ins_elsewhere(3, "3/min")) == 3
    throttle = LoginThrottle()
    assert not throttle.allow_request(sign_in_form(), None)
    assert 0 < throttle.wait() <= 60
    other = RequestFactory().post("/accounts/login/", REMOTE_ADDR="10.9.8.8")
    assert LoginThrottle().allow_request(other, None), "another address has its own count"


def test_concurrent_processes_lose_no_count(redis_url):
    """4 processes sending 60 forms each, all from the same moment, against 100/min: exactly
    100 get through (a read-append-write count lets more through when processes overlap)."""
    start_at = time.time() + 6  # every process has imported Django by then
    processes = [sign_ins_elsewhere(60, "100/min", start_at) for _ in range(4)]
    assert sum(allowed(process) for process in processes) == 100


def test_a_failing_cache_lets_requests_through(monkeypatch, caplog):
    """Throttling is a brake, not a gate: Redis down means no limit, and a warning."""
    monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, "login", "1/min")
    throttle = LoginThrottle()
    throttle.cache = RedisCache("redis://127.0.0.1:1/0", {})
    assert all(throttle.allow_request(sign_in_form(), None) for _ in range(3))
    assert "shared cache failed" in caplog.text


@pytest.mark.parametrize("before, count, into, limit, expected", [(0, 4, 15, 3, 45), (10, 2, 30, 6, 6)])
def test_retry_after_is_when_one_more_fits(before, count, into, limit, expected, monkeypatch):
    """A full window waits for its end; otherwise until enough of the previous window has
    slid out: 10 before, 2 now, 6 allowed: the previous may weigh 4/10, at 36 s; now is 30 s."""
    monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, "login", f"{limit}/min")
    throttle = LoginThrottle()
    throttle.before, throttle.count, throttle.overlap = before, count, 1 - into / 60
    assert throttle.wait() == pytest.approx(expected)
