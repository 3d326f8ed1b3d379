"""`hamiadmin`: the commands, their arguments and what each prints.

    hamiadmin get nodes|pods|queues|jobs|pending [--verdict never] [-o table|json|yaml]
    hamiadmin why NS/POD
    hamiadmin what-if FILE [--job NS/NAME --queue Q --min-member N --priority P]
    hamiadmin cordon|uncordon|drain NODE
    hamiadmin release NS/POD [--status deleted|succeeded|failed]
    hamiadmin completion bash

Exit status: 0 done, 1 the API refused (its error fields printed) or the configuration is
unusable, 2 bad arguments (argparse)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .client import ApiError, Client, quoted
from .config import ConfigError, resolve
from .render import FORMATS, rendered

RESOURCES = {
    "nodes": "/api/v1/nodes/",
    "pods": "/api/v1/pods/",
    "queues": "/api/v1/queues/",
    "jobs": "/api/v1/podgroups/",
    "pending": "/api/v1/pending/",
}
VERDICTS = ("never", "capacity", "rule", "invalid")
ENDINGS = ("deleted", "succeeded", "failed")
#: Pods holding cards on a node: what `drain` ends.
PLACED = ("scheduled", "running")
#: At most this many pods per `pods/bulk/release/` request (the API's MAX_PODS is larger).
RELEASE_BATCH = 500


class Refused(Exception):
    """A command cannot go on; the message names what is wrong."""


def pod_ref(text: str) -> tuple[str, str]:
    """`NS/POD` (or `POD`, in `default`) as (namespace, name)."""
    namespace, _, name = text.rpartition("/")
    if not name or "/" in namespace:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/POD, got {text!r}")
    return namespace or "default", name


# -- commands ----------------------------------------------------------------------------


def get(client: Client, args) -> tuple[Any, str]:
    params: dict[str, Any] = {}
    if args.verdict:
        if args.resource not in ("pods", "pending"):
            raise Refused(f"--verdict is for pods and pending, not {args.resource}")
        params["verdict"] = args.verdict
    if args.namespace:
        if args.resource in ("nodes", "queues"):
            raise Refused(f"--namespace is not for {args.resource}")
        params["namespace"] = args.namespace
    if args.resource == "nodes":
        params["cards"] = "false"  # the slim node: its usage without each card
    return client.every(RESOURCES[args.resource], **params), args.resource


def why(client: Client, args) -> tuple[Any, str | None]:
    namespace, name = args.pod
    answer = client.get(f"/api/v1/pods/{quoted(namespace, name)}/decision/")
    return answer, None


#: The verdict classes as the dashboard words them (`scheduling.engine.triage.VERDICT_WORDS`).
VERDICT_WORDS = {
    "never": "never fits here",
    "capacity": "waits for capacity",
    "rule": "held by a rule",
    "invalid": "invalid",
}


def why_text(answer: dict) -> str:
    """The pod page's first screen: status, the one-line reason, why it can never fit, what
    would make it fit, the closest nodes with their hints and cards, every node's reasons."""
    lines = [f"Pod:      {answer.get('pod')}", f"Status:   {answer.get('pod_status')}"]
    if answer.get("decision") is None:
        lines.append("Decision: none yet (not tried by a cycle)")
        return "\n".join(lines)
    lines.append(f"Decision: #{answer['decision']} {answer.get('outcome')} at {answer.get('created_at')}")
    lines.append(f"Reason:   {answer.get('summary')}")
    verdict = (answer.get("payload") or {}).get("verdict") or {}
    if verdict.get("class"):
        words = VERDICT_WORDS.get(verdict["class"], verdict["class"])
        lines.append(f"Verdict:  {words}: {verdict.get('fact') or ''}".rstrip(": "))
        if verdict.get("actions") and not answer.get("would_fit"):
            lines.append("What helps:")
            lines += [f"  - {action}" for action in verdict["actions"]]
    if answer.get("unschedulable"):
        lines.append(f"Never fits: {answer.get('unschedulable_words') or 'no node could ever take it'}")
    hints = [hint for hint in answer.get("would_fit") or [] if hint != answer.get("unschedulable_words")]
    if hints:
        lines.append("Would fit if:")
        lines += [f"  - {hint}" for hint in hints]
    for close in answer.get("closest_nodes") or []:
        state = "" if close.get("ready", True) else " (not ready)"
        lines.append(
            f"Closest #{close.get('rank')}: {close.get('node')}{state}, container {close.get('container')!r} "
            f"asks {close.get('count')} card(s), {close.get('missing')} short"
        )
        lines += [f"    hint: {hint}" for hint in close.get("hints") or []]
        lines += [
            f"    GPU {card.get('index')} {card.get('uuid')}: {card.get('words')}"
            for card in close.get("cards") or []
        ]
    waiting = answer.get("waiting") or []
    if waiting:
        lines.append("Waiting on:")
        lines += [f"  {line.get('node')}: {line.get('words')}" for line in waiting]
    return "\n".join(lines)


def what_if(client: Client, args) -> tuple[Any, str | None]:
    body = what_if_body(args)
    answer = client.post("/api/v1/whatif/", body)
    return answer, "whatif"


def what_if_body(args) -> dict:
    """The `whatif/` body from FILE (a pod, a list of pods, or `{pods, edits, job}`, JSON or
    YAML, `-` for stdin) and the flags, which add edits and the job."""
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        read = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise Refused(f"FILE {args.file}: {exc}") from None
    if isinstance(read, list):
        body: dict = {"pods": read}
    elif isinstance(read, dict) and "pods" in read:
        body = dict(read)
    elif isinstance(read, dict):
        body = {"pods": [read]}
    else:
        raise Refused(f"FILE {args.file}: expected a pod, a list of pods or {{pods, edits, job}}")
    edits = dict(body.get("edits") or {})
    for kind in ("cordon", "drain", "empty"):
        extra = getattr(args, kind) or []
        if extra:
            edits[kind] = list(edits.get(kind) or []) + extra
    if edits:
        body["edits"] = edits
    job = dict(body.get("job") or {})
    if args.job:
        job["namespace"], job["name"] = args.job
    for key in ("queue", "min_member", "priority"):
        if getattr(args, key) is not None:
            job[key] = getattr(args, key)
    if job:
        body["job"] = job
    return body


def cards_of(client: Client, node: str) -> list[dict]:
    """The node's cards; an unknown node is the API's 404."""
    client.get(f"/api/v1/nodes/{quoted(node)}/", cards="false")
    return client.every("/api/v1/cards/", node=node)


def cordon(client: Client, args, on: bool = True) -> tuple[Any, str]:
    action = "cordon" if on else "uncordon"
    done = [
        client.post(f"/api/v1/cards/{quoted(card['uuid'])}/{action}/") for card in cards_of(client, args.node)
    ]
    return done, "cards"


def uncordon(client: Client, args) -> tuple[Any, str]:
    return cordon(client, args, on=False)


def drain(client: Client, args) -> tuple[Any, str | None]:
    """Cordon every card of the node, then end (`deleted` unless --status) the pods placed
    on it, as `kubectl drain` evicts them; the answer lists both."""
    cards, _ = cordon(client, args, on=True)
    placed = [pod for pod in client.every("/api/v1/pods/", node=args.node) if pod.get("status") in PLACED]
    results: list[dict] = []
    for start in range(0, len(placed), RELEASE_BATCH):
        chunk = placed[start : start + RELEASE_BATCH]
        answer = client.post(
            "/api/v1/pods/bulk/release/",
            {
                "pods": [
                    {"namespace": p["namespace"], "name": p["name"], "uid": p.get("uid") or ""} for p in chunk
                ],
                "status": args.status,
            },
        )
        results += answer.get("pods", [])
    return {"node": args.node, "cards": cards, "pods": results}, None


def drain_text(answer: dict) -> str:
    lines = [f"node {answer['node']}: {len(answer['cards'])} card(s) cordoned"]
    for result in answer["pods"]:
        pod = result.get("pod") or {}
        line = f"  {pod.get('namespace')}/{pod.get('name')}: {result.get('outcome')} ({result.get('status')})"
        if result.get("error"):
            line += f": {result['error'].get('field')}: {result['error'].get('message')}"
        lines.append(line)
    if not answer["pods"]:
        lines.append("  no pods placed on it")
    return "\n".join(lines)


def release(client: Client, args) -> tuple[Any, str]:
    """End one pod: `deleted` (any pod) or `succeeded` through the pod's own endpoints,
    `failed` through `pods/bulk/release/` (a refusal there exits 1 naming its field)."""
    namespace, name = args.pod
    where = f"/api/v1/pods/{quoted(namespace, name)}/"
    if args.status == "deleted":
        return client.delete(where), "released"
    if args.status == "succeeded":
        return client.post(where + "complete/"), "released"
    answer = client.post(
        "/api/v1/pods/bulk/release/", {"pods": [{"namespace": namespace, "name": name}], "status": "failed"}
    )
    (result,) = answer["pods"]
    if result.get("error"):
        raise ApiError(
            409, {result["error"]["field"]: [result["error"]["message"]]}, "/api/v1/pods/bulk/release/"
        )
    return {"namespace": namespace, "name": name, "status": result.get("status"), "node": None}, "released"


COMMANDS = {
    "get": get,
    "why": why,
    "what-if": what_if,
    "cordon": cordon,
    "uncordon": uncordon,
    "drain": drain,
    "release": release,
}
TEXT = {"why": why_text, "drain": drain_text}


# -- the parser ---------------------------------------------------------------------------


def connection_options(suppress: bool) -> argparse.ArgumentParser:
    """--url, --token, --config and --output, accepted before or after the command (the
    command's copy leaves the value unset unless given, so it never hides the first)."""
    parser = argparse.ArgumentParser(add_help=False)
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--url", default=default, help="server root, e.g. https://hami.example (env HAMIADMIN_URL)"
    )
    parser.add_argument("--token", default=default, help="API token key (env HAMIADMIN_TOKEN)")
    parser.add_argument(
        "--config",
        default=default,
        help="YAML file with url and token (default ~/.config/hamiadmin/config.yaml)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default=argparse.SUPPRESS if suppress else "table",
        help="default table",
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    common = connection_options(suppress=True)
    parser = argparse.ArgumentParser(
        prog="hamiadmin",
        description="hamiadmin's REST API from the command line.",
        parents=[connection_options(suppress=False)],
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser(
        "get", parents=[common], help="list nodes, pods, queues, jobs or pending pods"
    )
    listing.add_argument("resource", choices=list(RESOURCES))
    listing.add_argument(
        "--verdict",
        action="append",
        choices=VERDICTS,
        help="pods and pending: only this verdict (repeatable)",
    )
    listing.add_argument("-n", "--namespace", help="pods, jobs and pending: only this namespace")

    explain = commands.add_parser("why", parents=[common], help="why a pod waits (the pod page as text)")
    explain.add_argument("pod", type=pod_ref, metavar="NS/POD")

    whatif = commands.add_parser(
        "what-if", parents=[common], help="where pods would go now; nothing is written"
    )
    whatif.add_argument(
        "file", metavar="FILE", help="a pod, a list of pods or {pods, edits, job}; JSON or YAML; - for stdin"
    )
    whatif.add_argument("--job", type=pod_ref, metavar="NS/NAME", help="decide the pods as one job")
    whatif.add_argument("--queue", help="the job's queue")
    whatif.add_argument("--min-member", type=int, dest="min_member", help="the job's minimum members")
    whatif.add_argument("--priority", type=int, help="the job's priority")
    whatif.add_argument(
        "--cordon", action="append", metavar="UUID", help="edit: cordon this card (repeatable)"
    )
    whatif.add_argument("--drain", action="append", metavar="NODE", help="edit: the node takes no new pod")
    whatif.add_argument("--empty", action="append", metavar="NODE", help="edit: the node's tenants gone")

    for name, words in (
        ("cordon", "keep every card of NODE from new pods; its tenants stay"),
        ("uncordon", "let every card of NODE take new pods again"),
        ("drain", "cordon NODE and end the pods placed on it"),
    ):
        node = commands.add_parser(name, parents=[common], help=words)
        node.add_argument("node", metavar="NODE")
        if name == "drain":
            node.add_argument("--status", choices=ENDINGS, default="deleted", help="what its pods end as")

    ending = commands.add_parser("release", parents=[common], help="end a pod and give its cards back")
    ending.add_argument("pod", type=pod_ref, metavar="NS/POD")
    ending.add_argument(
        "--status", choices=ENDINGS, default="deleted", help="what the pod ends as (default deleted)"
    )

    shell = commands.add_parser("completion", help="print a shell completion script")
    shell.add_argument("shell", choices=["bash"])
    return parser


def completion_script(parser: argparse.ArgumentParser) -> str:
    """A bash completion script: the commands, then each command's words and options,
    read from the parser so it never drifts from it."""
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    cases = []
    for name, sub in commands.choices.items():
        words: list[str] = []
        for action in sub._actions:
            words += [o for o in action.option_strings if o.startswith("--")]
            if not action.option_strings and action.choices:
                words += list(action.choices)
        cases.append(f'        {name}) words="{" ".join(words)}" ;;')
    names = " ".join(commands.choices)
    return "\n".join(
        [
            '# hamiadmin bash completion: eval "$(hamiadmin completion bash)"',
            "_hamiadmin() {",
            '    local cur="${COMP_WORDS[COMP_CWORD]}" command="" words i',
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            '        case "${COMP_WORDS[i]}" in -*) ;; *) command="${COMP_WORDS[i]}"; break ;; esac',
            "    done",
            '    case "$command" in',
            f'        "") words="{names} --url --token --config --output" ;;',
            *cases,
            "    esac",
            '    case "${COMP_WORDS[COMP_CWORD-1]}" in',
            f'        -o|--output) words="{" ".join(FORMATS)}" ;;',
            f'        --verdict) words="{" ".join(VERDICTS)}" ;;',
            f'        --status) words="{" ".join(ENDINGS)}" ;;',
            "    esac",
            '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            "}",
            "complete -o default -F _hamiadmin hamiadmin",
        ]
    )


# -- running ------------------------------------------------------------------------------


def error_lines(error: ApiError) -> list[str]:
    """The API's error body, one line per field (`detail` first), after the status."""
    lines = [f"error: HTTP {error.status} from {error.url}" if error.status else "error:"]
    body = error.body
    if isinstance(body, dict):
        for key, value in body.items():
            messages = value if isinstance(value, list) else [value]
            for message in messages:
                text = message if isinstance(message, str) else json.dumps(message)
                lines.append(f"  {key}: {text}")
    else:
        lines.append(f"  {json.dumps(body)}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "completion":
        print(completion_script(parser))
        return 0
    try:
        settings = resolve(args.url, args.token, args.config)
        answer, kind = COMMANDS[args.command](Client(settings.url, settings.token), args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ApiError as exc:
        print("\n".join(error_lines(exc)), file=sys.stderr)
        return 1
    if args.output == "table" and args.command in TEXT:
        print(TEXT[args.command](answer))
    elif args.output == "table" and args.command == "what-if":
        print(rendered(answer.get("pods", []), "table", "whatif"))
        if answer.get("job"):
            print(f"job: {json.dumps(answer['job'])}")
    else:
        print(rendered(answer, args.output, kind))
    return 0
