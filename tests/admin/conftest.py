"""Admin fixtures: the web pages', imported (the admin pages show the same data)."""

from tests.web.conftest import local_triggers  # noqa: F401 - autouse: no Celery tasks from these tests
