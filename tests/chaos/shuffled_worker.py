"""A real Celery worker (`celery -A hamiadmin worker ...`) whose cycles each take a random
sample of the due pods instead of the queue's head.

The engine is deterministic: workers reading the same queue decide the same pods the same
way and merely skip each other's work. With a sample, concurrent commits place different
pods on the same cards, the case the commit's row locks and re-check exist for (as
`tests.pipeline.cycle_worker --shuffle` does for plain processes). Arguments after the
module are the worker's own.
"""

from __future__ import annotations

import os
import random
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
django.setup()

from hamiadmin.celery import app  # noqa: E402
from scheduling.pipeline import cycle  # noqa: E402

_queue_head = cycle.due_pods
_rng = random.Random(os.getpid())


def due_sample(limit, now=None):
    """`limit` due pods drawn from the first `5 * limit`: as many as the queue's head would
    give (so the cycle's "the queue was full, run another" still holds), in another order."""
    rows = _queue_head(limit * 5, now)
    _rng.shuffle(rows)
    return rows[:limit]


cycle.due_pods = due_sample

if __name__ == "__main__":
    app.worker_main(sys.argv[1:])
