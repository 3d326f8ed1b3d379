"""Observability fixtures: a scrape of /metrics read back with prometheus_client's parser.

Counters and histograms are process-global: tests compare values before and after what
they do, never absolute numbers.
"""

from __future__ import annotations

import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families


@pytest.fixture(autouse=True)
def local_triggers(settings):
    """No Celery tasks: cycles are run by the tests themselves."""
    settings.REDIS_URL = ""


Samples = dict[tuple[str, frozenset], float]


def parse(text: str) -> Samples:
    """{(sample name, frozenset of label pairs): value} of a Prometheus text exposition."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"{key} exported twice"
            samples[key] = sample.value
    return samples


def value(samples: Samples, name: str, **labels) -> float:
    """One sample's value; 0 when it is absent (a counter never touched)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def series(samples: Samples, name: str) -> dict[frozenset, float]:
    """Every sample of one name, by its labels."""
    return {labels: v for (sample, labels), v in samples.items() if sample == name}


def scrape(client, **headers) -> Samples:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(response.content.decode())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
