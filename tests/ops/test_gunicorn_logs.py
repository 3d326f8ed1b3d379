"""gunicorn as the image starts it never writes the extender token of a URL to its logs.

kube-scheduler can only send the token in the path (`/extender/key/<token>/filter`), and
gunicorn writes its access lines itself (`--access-logfile -`): a real gunicorn, started
with the image's command on a free loopback port, answers keyed calls and its access lines
and error output are read back.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOKEN = "kube-scheduler-s3cret-9f2c"


def image_command() -> list[str]:
    """The runtime CMD of deploy/Dockerfile (the last CMD)."""
    [*_, line] = [
        line for line in (REPO / "deploy" / "Dockerfile").read_text().splitlines() if line.startswith("CMD ")
    ]
    return json.loads(line.removeprefix("CMD "))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def call(url: str, body: bytes | None = None) -> int:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data=body, method="POST" if body else "GET"), timeout=10
        ):
            return 200
    except urllib.error.HTTPError as refused:
        return refused.code


def serve_and_call(tmp_path, environment: dict) -> tuple[list[int], str, str]:
    """Start gunicorn with the image's command on 127.0.0.1, call the extender with the token in
    the path (right, then wrong), stop it; (status codes, stdout, stderr)."""
    port = free_port()
    argv = image_command()
    argv[argv.index("--bind") + 1] = f"127.0.0.1:{port}"
    assert argv[0] == "gunicorn" and argv[argv.index("--access-logfile") + 1] == "-"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "LOG_FORMAT")
    }
    env.update(
        PYTHONPATH=str(REPO),
        HAMIADMIN_VAR_DIR=str(tmp_path),
        HAMI_EXTENDER_TOKEN=TOKEN,
        WEB_CONCURRENCY="1",
        HOME=str(tmp_path),
        **environment,
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    gunicorn = Path(sys.executable).with_name("gunicorn")
    process = subprocess.Popen(
        [str(gunicorn), *argv[1:]],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1][-3000:]
            try:
                if call(f"{base}/healthz") == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "gunicorn did not answer /healthz within 60 s"
            time.sleep(0.2)
        codes = [
            call(f"{base}/extender/key/{TOKEN}/filter", b"{not json"),  # right token, bad body: 400
            call(f"{base}/extender/key/{TOKEN}-wrong/bind", b"{}"),  # wrong token: 401
        ]
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
    return codes, out, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "environment",
    [
        {},  # development: DEBUG on, readable lines
        {
            "HAMIADMIN_ENV": "production",
            "SECRET_KEY": "x" * 50,
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
        },
    ],
    ids=["development", "production"],
)
def test_the_access_log_of_the_image_command_never_carries_the_extender_token(tmp_path, environment):
    codes, out, err = serve_and_call(tmp_path, environment)
    assert codes == [400, 401]
    access = [line for line in out.splitlines() if "/extender/" in line]
    assert len(access) == 2, out
    # two gunicorn workers may each write one line, in either order
    assert any('"POST /extender/key/[redacted]/filter HTTP/1.1" 400' in line for line in access), access
    assert any('"POST /extender/key/[redacted]/bind HTTP/1.1" 401' in line for line in access), access
    assert TOKEN not in out
    assert TOKEN not in err, [line for line in err.splitlines() if TOKEN in line]
