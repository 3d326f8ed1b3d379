"""The write paths are tested on the pipeline's fixtures: a cluster through the same write
paths agents use, pods as dicts, triggers kept local."""

import pytest

from tests.pipeline.conftest import local_triggers  # noqa: F401 (autouse: no Celery tasks)

#: Wakes run after the commit that freed capacity, so these tests need real commits.
AFTER_COMMIT = pytest.mark.django_db(transaction=True)
