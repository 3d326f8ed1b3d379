"""Decision log lines: one INFO line per decision, one DEBUG line per card of the chosen
node, as JSON in production and readable lines in development."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from hamiadmin.logging import REDACTED, JsonFormatter, ReadableFormatter, configure, format_from_env
from scheduling import services
from scheduling.models import Allocation, Decision, Pod
from scheduling.pipeline import run_cycle
from tests.pipeline.conftest import REPO, card, submit

pytestmark = pytest.mark.django_db

LOGGER = "hamiadmin.decisions"
BAD_WEIGHTS = {"hami.io/device-scoring-weights": "slot=1,core=x,memory=1"}


def json_lines(records) -> list[dict]:
    formatter = JsonFormatter()
    return [json.loads(formatter.format(record)) for record in records]


def decided(caplog, level=logging.DEBUG):
    caplog.set_level(level, logger=LOGGER)
    services.report_inventory(
        "node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1), card("GPU-2", 2, memory=2000)]
    )
    submit("train", gpu=2, mem=3000, annotations={"hami.io/gpu-scheduler-policy": "binpack"})
    submit("huge", gpu=1, mem=100000)
    submit("invalid", gpu=1, mem=100, annotations=BAD_WEIGHTS, validate=False)
    caplog.clear()
    report = run_cycle()
    records = [r for r in caplog.records if r.name == LOGGER]
    return report, records


def test_one_info_line_per_decision_with_what_the_decision_row_says(caplog):
    report, records = decided(caplog)
    lines = {line["pod"]: line for line in json_lines(r for r in records if r.levelno == logging.INFO)}
    assert set(lines) == {"default/train", "default/huge", "default/invalid"}

    train = lines["default/train"]
    row = Decision.objects.get(pod__name="train")
    held = sorted(Allocation.objects.filter(pod__name="train").values_list("card__uuid", flat=True))
    assert train["level"] == "INFO" and train["logger"] == LOGGER
    assert train["outcome"] == "scheduled" and train["node"] == "node1"
    assert sorted(train["cards"]) == held and len(held) == 2
    assert train["chain"] == row.payload["policy"]["gpu"] == ["binpack"]
    assert train["duration_ms"] == pytest.approx(row.duration_ms, abs=0.001) and train["duration_ms"] > 0
    assert train["cycle"] == report.cycle_id
    assert train["reason"] is None
    assert "default/train scheduled on node1" in train["message"]

    huge = lines["default/huge"]
    assert huge["outcome"] == "pending" and huge["node"] is None and huge["cards"] == []
    assert (
        huge["reason"]
        == Pod.objects.get(name="huge").reason
        == "0/1 nodes are available: 1 CardInsufficientMemory."
    )
    assert huge["reasons"] == {"CardInsufficientMemory": 3}
    assert huge["chain"] == Decision.objects.get(pod__name="huge").payload["policy"]["gpu"]

    invalid = lines["default/invalid"]
    assert invalid["outcome"] == "rejected" and invalid["reason"] == Pod.objects.get(name="invalid").error
    assert invalid["field"] == "annotations.hami.io/device-scoring-weights"


def test_one_debug_line_per_card_of_the_chosen_node(caplog):
    _, records = decided(caplog)
    lines = json_lines(r for r in records if r.levelno == logging.DEBUG)
    table = Decision.objects.get(pod__name="train").payload["containers"][0]["cards"]
    assert [(line["pod"], line["node"], line["container"]) for line in lines] == [
        ("default/train", "node1", "main")
    ] * 3
    assert [
        (line["uuid"], line["score"], line["eligible"], line["reason"], line["chosen"]) for line in lines
    ] == [
        (entry["uuid"], entry["score"], entry["eligible"], entry["reason"], entry["chosen"])
        for entry in table
    ]
    small = next(line for line in lines if line["uuid"] == "GPU-2")
    assert small["eligible"] is False and small["reason"] == "CardInsufficientMemory" and not small["chosen"]


def test_card_lines_are_not_built_at_info_level(caplog):
    _, records = decided(caplog, level=logging.INFO)
    assert [r for r in records if r.levelno == logging.DEBUG] == []
    assert len(records) == 3


def test_credentials_passed_as_fields_are_never_written():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "agent report", None, None)
    record.__dict__.update(
        node="node1", token="abcd1234", api_key="k", Authorization="Bearer z", password="p"
    )
    line = json.loads(JsonFormatter().format(record))
    assert line["node"] == "node1"
    assert {line[key] for key in ("token", "api_key", "Authorization", "password")} == {REDACTED}
    readable = ReadableFormatter().format(record)
    assert "abcd1234" not in readable and "node=node1" in readable


def test_an_exception_is_kept_in_the_json_line():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "failed" and "ValueError: boom" in line["exception"]


def log_through_settings(**env) -> str:
    """stderr of a process that sets Django up with `env` and logs one decision-like line."""
    script = (
        "import django, logging; django.setup(); "
        "logging.getLogger('hamiadmin.decisions').info('pod default/p scheduled', "
        "extra={'pod': 'default/p', 'cards': ['GPU-0', 'GPU-1']})"
    )
    base = {key: value for key, value in os.environ.items() if key not in ("LOG_FORMAT", "HAMIADMIN_ENV")}
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "DJANGO_SETTINGS_MODULE": "hamiadmin.settings", **env},
    )
    assert result.returncode == 0, result.stderr
    return result.stderr.strip()


def test_production_settings_log_json_and_development_readable_lines(tmp_path):
    production = log_through_settings(
        HAMIADMIN_ENV="production", SECRET_KEY="x" * 50, HAMIADMIN_VAR_DIR=str(tmp_path)
    )
    line = json.loads(production)
    assert line["pod"] == "default/p" and line["cards"] == ["GPU-0", "GPU-1"] and line["level"] == "INFO"

    development = log_through_settings(HAMIADMIN_VAR_DIR=str(tmp_path))
    assert development.endswith(
        "INFO hamiadmin.decisions pod default/p scheduled [pod=default/p cards=GPU-0,GPU-1]"
    )

    forced = log_through_settings(LOG_FORMAT="json", HAMIADMIN_VAR_DIR=str(tmp_path))
    assert json.loads(forced)["message"] == "pod default/p scheduled"


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, "plain"),
        ({"HAMIADMIN_ENV": "production"}, "json"),
        ({"HAMIADMIN_ENV": " Production ", "LOG_FORMAT": "plain"}, "plain"),
        ({"LOG_FORMAT": " JSON "}, "json"),
    ],
)
def test_processes_without_settings_choose_the_format_by_the_settings_rule(env, expected):
    assert format_from_env(env) == expected


@pytest.fixture
def agent_logger():
    logger = logging.getLogger("tests.agent")
    logger.propagate = False
    yield logger
    for handler in logger.handlers[:]:
        logger.removeHandler(handler)
    logger.propagate = True


def test_configure_replaces_the_handlers_and_redacts_path_secrets(agent_logger, capsys):
    configure("INFO", "json", logger=agent_logger)
    configure("INFO", "json", logger=agent_logger)

    agent_logger.info("GET /extender/key/s3cret/filter", extra={"node": "node1", "token": "t0k"})
    agent_logger.debug("not at INFO")

    [line] = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert entry["message"] == f"GET /extender/key/{REDACTED}/filter"
    assert (entry["level"], entry["logger"], entry["node"], entry["token"]) == (
        "INFO",
        "tests.agent",
        "node1",
        REDACTED,
    )


def test_an_unknown_format_is_named_and_gives_readable_lines(agent_logger, capsys):
    configure("INFO", "xml", logger=agent_logger, plain="%(levelname)s: %(message)s")

    assert (
        capsys.readouterr().err
        == "WARNING: LOG_FORMAT: expected one of plain, json, got 'xml'; using plain\n"
    )
