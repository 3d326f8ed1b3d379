"""`hamiadmin` against a live test server (pytest-django's `live_server`, a real HTTP
server): the commands read and write through the REST API as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml
from django.core.cache import cache
from rest_framework.test import APIClient

from cli.client import PATHS
from cli.main import build_parser, completion_script, main
from scheduling.api.tokens import issue_agent_token, issue_role_token
from scheduling.pipeline import run_cycle
from tests.api.conftest import TWO_NODES, gpu_pod, report_body
from tests.conftest import pod_row_held


@pytest.fixture
def server(live_server, monkeypatch, tmp_path):
    """The live server's URL and an operator token in the environment; no config file of
    the machine's user is read (XDG_CONFIG_HOME is empty)."""
    cache.clear()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HAMIADMIN_URL", live_server.url)
    monkeypatch.setenv("HAMIADMIN_TOKEN", issue_role_token("cli-operator", "operator"))
    yield live_server.url
    cache.clear()


def as_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def cluster(server):
    """node1 (2 x T4) and node2 (2 x T4 + 1 A100) as their agents report them; `placed`
    holds one card on node1, `huge` asks more memory than any card has and waits."""
    for name, cards in TWO_NODES.items():
        answer = as_client(issue_agent_token(name)).post(
            "/api/v1/agents/report/",
            report_body(name, *cards, labels={"kubernetes.io/hostname": name}),
            format="json",
        )
        assert answer.status_code == 200, answer.content
    operator = as_client(issue_role_token("cli-setup", "operator"))
    for pod in (
        gpu_pod("placed", mem=1000, nodeSelector={"kubernetes.io/hostname": "node1"}),
        gpu_pod("huge", mem=99999),
    ):
        answer = operator.post("/api/v1/pods/", pod, format="json")
        assert answer.status_code == 201, answer.content
    run_cycle(trigger="test")
    return server


def hamiadmin(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_get_nodes_is_a_table_of_both_nodes(cluster, capsys):
    code, out, _ = hamiadmin(capsys, "get", "nodes")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[:3] == ["NAME", "READY", "CARDS"]
    assert [row.split()[:3] for row in rows] == [["node1", "yes", "2"], ["node2", "yes", "3"]]


def test_get_pods_as_json_and_yaml_are_the_api_rows(cluster, capsys):
    code, out, _ = hamiadmin(capsys, "get", "pods", "-o", "json")
    assert code == 0
    by_name = {pod["name"]: pod for pod in json.loads(out)}
    assert by_name["placed"]["status"] == "scheduled" and by_name["placed"]["node"] == "node1"
    assert by_name["huge"]["status"] == "pending"
    code, out, _ = hamiadmin(capsys, "get", "pods", "--output", "yaml")
    assert code == 0
    assert {pod["name"] for pod in yaml.safe_load(out)} == {"placed", "huge"}


def test_get_pending_filters_by_verdict(cluster, capsys):
    code, out, _ = hamiadmin(capsys, "get", "pending", "--verdict", "never", "-o", "json")
    assert code == 0
    (pod,) = json.loads(out)
    assert (pod["name"], pod["verdict"]) == ("huge", "never")
    code, out, _ = hamiadmin(capsys, "get", "pending", "--verdict", "capacity")
    assert code == 0
    assert out.splitlines()[1:] == []  # the header alone
    code, out, _ = hamiadmin(capsys, "get", "pending")
    assert "default/huge" in out and "never" in out


def test_why_tells_a_pending_pod_it_never_fits(cluster, capsys):
    code, out, _ = hamiadmin(capsys, "why", "default/huge")
    assert code == 0
    assert "Pod:      default/huge" in out and "Status:   pending" in out
    assert "Never fits:" in out
    code, out, _ = hamiadmin(capsys, "why", "default/huge", "-o", "json")
    assert json.loads(out)["unschedulable"] is True


def test_cordon_then_uncordon_every_card_of_a_node(cluster, capsys):
    code, out, _ = hamiadmin(capsys, "cordon", "node2", "-o", "json")
    assert code == 0
    assert [(card["uuid"], card["cordoned"]) for card in json.loads(out)] == [
        ("GPU-2-0", True),
        ("GPU-2-1", True),
        ("GPU-2-2", True),
    ]
    code, out, _ = hamiadmin(capsys, "uncordon", "node2")
    assert code == 0
    assert out.splitlines()[0].split()[:4] == ["UUID", "NODE", "INDEX", "CORDONED"]
    assert [row.split()[3] for row in out.splitlines()[1:]] == ["no", "no", "no"]
    viewer = as_client(issue_role_token("cli-viewer", "viewer"))
    assert not any(card["cordoned"] for card in viewer.get("/api/v1/cards/?node=node2").json()["results"])


def test_cordon_an_unknown_node_exits_1_with_the_404(cluster, capsys):
    code, _, err = hamiadmin(capsys, "cordon", "nowhere")
    assert code == 1
    assert "HTTP 404" in err and "detail:" in err


def test_drain_cordons_and_ends_the_pods_on_the_node(cluster, capsys):
    code, out, _ = hamiadmin(capsys, "drain", "node1")
    assert code == 0
    assert "node node1: 2 card(s) cordoned" in out
    assert "default/placed: released (deleted)" in out


def test_release_gives_the_pod_cards_back(cluster, capsys):
    code, out, _ = hamiadmin(capsys, "release", "default/placed", "-o", "json")
    assert code == 0
    released = json.loads(out)
    assert released["status"] == "deleted"
    assert all(not container["devices"] for container in released["containers"])
    code, _, err = hamiadmin(capsys, "release", "default/placed", "--status", "succeeded")
    assert code == 1
    assert "HTTP 409" in err and "scheduled or running" in err


def test_release_sends_again_after_a_503_for_a_row_held_past_the_lock_bound(
    cluster, capsys, require_postgres, settings
):
    """Another writer holds the pod's row longer than HAMI_DB_WEB_LOCK_TIMEOUT_MS: the server
    answers 503 with `Retry-After: 1` and writes nothing; the CLI waits and sends it again."""
    with pod_row_held("placed", settings.DB_WEB_LOCK_TIMEOUT_MS / 1000 + 0.4):
        started = time.monotonic()
        code, out, err = hamiadmin(capsys, "release", "default/placed", "-o", "json")
        took = time.monotonic() - started
    assert code == 0, err
    assert json.loads(out)["status"] == "deleted"
    assert took >= 1.0, f"answered in {took:.2f} s: the first try was not refused and waited for"


def test_what_if_reads_a_yaml_file_with_edits(cluster, capsys, tmp_path):
    scenario = tmp_path / "whatif.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {"pods": [gpu_pod("a", mem=30000)], "edits": {"add": [{"like": "node2", "count": 1}]}}
        ),
        encoding="utf-8",
    )
    code, out, _ = hamiadmin(capsys, "what-if", str(scenario), "--cordon", "GPU-2-2", "-o", "json")
    assert code == 0
    (decision,) = json.loads(out)["pods"]
    assert (decision["payload"]["status"], decision["payload"]["node"]) == ("scheduled", "node2-whatif-1")
    code, out, _ = hamiadmin(capsys, "what-if", str(scenario), "--cordon", "GPU-2-2")
    assert code == 0
    assert out.splitlines()[1].split()[:3] == ["default/a", "scheduled", "node2-whatif-1"]
    code, _, err = hamiadmin(capsys, "what-if", str(scenario), "--drain", "nowhere")
    assert code == 1 and "edits.drain[0]" in err


def test_what_if_names_a_bad_pod_field(cluster, capsys, tmp_path):
    scenario = tmp_path / "pod.json"
    scenario.write_text(json.dumps({"name": "a", "containers": "none"}), encoding="utf-8")
    code, _, err = hamiadmin(capsys, "what-if", str(scenario))
    assert code == 1
    assert "HTTP 400" in err and "pods[0].containers" in err


def test_a_bad_token_exits_1_naming_the_problem(server, capsys):
    code, out, err = hamiadmin(capsys, "get", "nodes", "--token", "not-a-key")
    assert (code, out) == (1, "")
    assert "HTTP 401" in err and "detail: Invalid token." in err


def test_no_token_says_how_to_set_one(server, capsys, monkeypatch):
    monkeypatch.delenv("HAMIADMIN_TOKEN")
    code, _, err = hamiadmin(capsys, "get", "nodes")
    assert code == 1
    assert "HAMIADMIN_TOKEN" in err and "--token" in err and "config.yaml" in err


def test_the_config_file_gives_url_and_token(cluster, capsys, monkeypatch, tmp_path):
    token = os.environ["HAMIADMIN_TOKEN"]
    url = os.environ["HAMIADMIN_URL"]
    monkeypatch.delenv("HAMIADMIN_TOKEN")
    monkeypatch.delenv("HAMIADMIN_URL")
    path = tmp_path / "hamiadmin.yaml"
    path.write_text(yaml.safe_dump({"url": url, "token": token}), encoding="utf-8")
    code, out, _ = hamiadmin(capsys, "--config", str(path), "get", "queues", "-o", "json")
    assert code == 0
    assert isinstance(json.loads(out), list)
    code, _, err = hamiadmin(capsys, "get", "jobs", "--config", str(tmp_path / "missing.yaml"))
    assert code == 1 and "missing.yaml does not exist" in err


def test_the_console_script_runs_as_its_own_process(cluster):
    done = subprocess.run(
        [sys.executable, "-m", "cli", "get", "pods", "--verdict", "never", "-o", "json"],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [pod["name"] for pod in json.loads(done.stdout)] == ["huge"]


def test_bash_completion_lists_every_command_and_its_words():
    script = completion_script(build_parser())
    assert "complete -o default -F _hamiadmin hamiadmin" in script
    for command in ("get", "why", "what-if", "cordon", "uncordon", "drain", "release"):
        assert f"        {command}) words=" in script
    completed = subprocess.run(
        [
            "bash",
            "-c",
            script + '\nCOMP_WORDS=(hamiadmin get pe); COMP_CWORD=2; _hamiadmin; echo "${COMPREPLY[@]}"',
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (completed.returncode, completed.stdout.split()) == (0, ["pending"]), completed.stderr


def test_options_go_before_or_after_the_command(cluster, capsys):
    code, out, _ = hamiadmin(capsys, "-o", "json", "get", "nodes")
    assert code == 0 and [node["name"] for node in json.loads(out)] == ["node1", "node2"]
    code, out, _ = hamiadmin(capsys, "get", "nodes", "-o", "yaml")
    assert code == 0 and [node["name"] for node in yaml.safe_load(out)] == ["node1", "node2"]


def test_a_verdict_for_nodes_is_refused_naming_the_flag(server, capsys):
    code, _, err = hamiadmin(capsys, "get", "nodes", "--verdict", "never")
    assert code == 1 and "--verdict is for pods and pending" in err


def test_every_path_the_cli_calls_is_in_the_served_schema(server):
    asked = urllib.request.Request(
        server + "/api/schema/?" + urllib.parse.urlencode({"format": "json"}),
        headers={"Authorization": f"Token {os.environ['HAMIADMIN_TOKEN']}"},
    )
    with urllib.request.urlopen(asked, timeout=60) as answer:
        schema = json.loads(answer.read())
    documented = {
        (method, path)
        for path, operations in schema["paths"].items()
        for method in operations
        if method != "parameters"
    }
    assert PATHS <= documented, sorted(PATHS - documented)


def test_why_answers_for_a_placed_pod_and_a_pod_held_by_a_rule(cluster, capsys):
    """A placed pod says where it runs; a gang member alone (min-member 2) says the rule that
    holds it: the gang's other member is not known yet."""
    operator = as_client(issue_role_token("cli-setup", "operator"))
    lone = gpu_pod(
        "lone", mem=1000, annotations={"hami.io/group-name": "pair", "hami.io/group-min-member": "2"}
    )
    assert operator.post("/api/v1/pods/", lone, format="json").status_code == 201
    run_cycle(trigger="test")

    code, out, _ = hamiadmin(capsys, "why", "default/placed")
    assert code == 0
    assert "Status:   scheduled" in out and "Decision: #" in out and " scheduled at " in out
    assert "node1" in out and "Never fits:" not in out

    code, out, _ = hamiadmin(capsys, "why", "default/lone")
    assert code == 0
    assert "Status:   pending" in out and "Never fits:" not in out
    assert "Verdict:  held by a rule: gang default/pair: 1/2 members known" in out
    assert "  - submit the missing members (same hami.io/group-name)" in out
    code, out, _ = hamiadmin(capsys, "why", "default/lone", "-o", "json")
    assert json.loads(out)["payload"]["verdict"]["class"] == "rule"
