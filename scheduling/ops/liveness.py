"""Liveness of the Celery worker and beat, for Kubernetes exec probes.

Neither process serves HTTP, so each touches a heartbeat file from its own main loop
(scheduling.ops.celery_process): the worker from its consumer's timer, beat on every tick of
its scheduler. A loop that hangs stops touching; the probe sees the file age:

    python -m scheduling.ops.liveness worker --max-age 60   # exit 0 fresh, 1 stale or missing
    python -m scheduling.ops.liveness beat --max-age 60

Files: HAMI_WORKER_HEARTBEAT_FILE (default /tmp/hamiadmin-worker-heartbeat) and
HAMI_BEAT_HEARTBEAT_FILE (default /tmp/hamiadmin-beat-heartbeat). This module imports
neither Django nor Celery, so a probe costs a bare Python start.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROLES = {
    "worker": ("HAMI_WORKER_HEARTBEAT_FILE", "/tmp/hamiadmin-worker-heartbeat"),
    "beat": ("HAMI_BEAT_HEARTBEAT_FILE", "/tmp/hamiadmin-beat-heartbeat"),
}
EXIT_FRESH, EXIT_STALE, EXIT_USAGE = 0, 1, 2


def heartbeat_file(role: str) -> Path:
    variable, default = ROLES[role]
    return Path(os.environ.get(variable, "").strip() or default)


def touch(path: Path) -> None:
    """Mark the file fresh (create it if needed). Errors are the caller's to log."""
    path.touch(exist_ok=True)
    os.utime(path)


def age(path: Path, now: float | None = None) -> float | None:
    """Seconds since the file was touched, or None when it does not exist."""
    try:
        modified = path.stat().st_mtime
    except FileNotFoundError:
        return None
    return max(0.0, (time.time() if now is None else now) - modified)


def check(path: Path, max_age: float) -> tuple[bool, str]:
    seconds = age(path)
    if seconds is None:
        return False, f"{path} does not exist: the process has not started its loop"
    if seconds > max_age:
        return False, f"{path} is {seconds:.0f}s old (more than {max_age:g}s): the loop is stuck or gone"
    return True, f"{path} is {seconds:.1f}s old"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduling.ops.liveness",
        description="Exit 0 if the worker's or beat's heartbeat file is fresh, 1 if stale or missing.",
    )
    parser.add_argument("role", choices=sorted(ROLES), help="whose heartbeat file to check")
    parser.add_argument(
        "--max-age", type=float, default=60.0, help="seconds a heartbeat stays fresh (default 60)"
    )
    parser.add_argument("--file", help="the heartbeat file (default: from the environment, see above)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_FRESH
    if args.max_age <= 0:
        print("--max-age: must be more than 0 seconds", file=sys.stderr)
        return EXIT_USAGE
    fresh, text = check(Path(args.file) if args.file else heartbeat_file(args.role), args.max_age)
    print(f"{args.role}: {text}")
    return EXIT_FRESH if fresh else EXIT_STALE


if __name__ == "__main__":
    sys.exit(main())
