"""deploy/grafana/hamiadmin.json, read as data: every PromQL expression in it (and every one
the docs give as an example) names only series that `/metrics` really serves, so a renamed
metric breaks this test instead of a dashboard panel."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduling import services
from scheduling.ops.scrape import exposition

from .manifests import DEPLOY, REPO

DASHBOARD = DEPLOY / "grafana" / "hamiadmin.json"
METRIC = re.compile(r"\bhamiadmin_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}


@pytest.fixture
def served(db) -> set[str]:
    """Every series name /metrics serves, with a measured card so the NVML gauges appear."""
    card = {"uuid": "GPU-0", "index": 0, "memory": 15000, "observed": {"memory": 1, "utilization": 2}}
    services.report_inventory("node1", {}, {}, [card])
    names = set()
    for family in text_string_to_metric_families(exposition().decode()):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def expressions(node) -> list[str]:
    """Every `expr` and templating `query` in the dashboard, wherever it nests."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                found.append(value["query"])
            else:
                found.extend(expressions(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(expressions(item))
    return found


def test_the_dashboard_is_grafana_json_with_a_datasource_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "hamiadmin" and dashboard["panels"]
    assert "datasource" in {variable["name"] for variable in dashboard["templating"]["list"]}
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_promql_expression_of_the_dashboard_names_served_series(served):
    exprs = expressions(json.loads(DASHBOARD.read_text()))
    assert len(exprs) > 15
    for expr in exprs:
        named = set(METRIC.findall(expr))
        assert named, f"no hamiadmin series in {expr!r}"
        assert named <= served, f"{expr!r} names {sorted(named - served)}, which /metrics does not serve"


def test_the_promql_examples_of_the_docs_name_served_series(served):
    text = (REPO / "docs" / "deploy.md").read_text()
    named = set(METRIC.findall(text))
    assert named and named <= served, sorted(named - served)
