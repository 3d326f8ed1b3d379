"""The extender endpoints: plain JSON views speaking kube-scheduler's extender types.

kube-scheduler encodes ExtenderArgs / ExtenderBindingArgs with Go field names and decodes
answers case-insensitively; we read keys case-insensitively and answer with Go's names.
The shared token (HAMI_EXTENDER_TOKEN), when set, must come as `Authorization: Bearer`
or in the URL (`/extender/key/<token>/...`, since kube-scheduler cannot add headers).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .api import KubeApi, api_from_config
from .binder import Binder
from .extender import bind_pod, filter_pod

log = logging.getLogger("hamiadmin.kube.extender")

#: ExtenderArgs carry whole Node objects when nodeCacheCapable is false: allow big bodies.
MAX_BODY_BYTES = 64 * 1024 * 1024

_api: KubeApi | None = None
_api_lock = threading.Lock()


def use_api(api: KubeApi | None) -> None:
    """Set the Kubernetes client the bind endpoint uses (None: build from settings again)."""
    global _api
    with _api_lock:
        _api = api


def kube_api() -> KubeApi:
    """HAMIADMIN["KUBECONFIG"] if set, else the pod's service account (in-cluster)."""
    global _api
    with _api_lock:
        if _api is None:
            _api = api_from_config(settings.HAMIADMIN.get("KUBECONFIG") or None)
        return _api


class BadRequest(Exception):
    pass


def authorized(request, token: str | None) -> str:
    """ "" when the caller may proceed, else why not."""
    expected = settings.HAMIADMIN.get("EXTENDER_TOKEN") or ""
    if token is not None and not expected:
        return "this server has no extender token (HAMI_EXTENDER_TOKEN); use /extender/<verb>"
    if not expected:
        return ""
    presented = token
    if presented is None:
        header = request.headers.get("Authorization", "")
        presented = header[7:].strip() if header[:7].lower() == "bearer " else ""
    if presented and hmac.compare_digest(presented.encode(), expected.encode()):
        return ""
    return "missing or wrong extender token"


def read_args(request) -> dict:
    raw = request.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw or b"null")
    except ValueError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return {key.lower(): value for key, value in body.items()}


def guarded(view):
    """POST only, token checked, JSON errors, and never an HTML error page."""

    @csrf_exempt
    def wrapper(request, token: str | None = None):
        if request.method != "POST":
            return JsonResponse({"Error": "POST only"}, status=405)
        refusal = authorized(request, token)
        if refusal:
            return JsonResponse({"Error": refusal}, status=401)
        try:
            return view(read_args(request))
        except BadRequest as exc:
            return JsonResponse({"Error": str(exc)}, status=400)
        except Exception as exc:  # noqa: BLE001 - kube-scheduler gets a readable error, we get the trace
            log.exception("extender %s failed", view.__name__)
            return JsonResponse({"Error": f"internal error: {type(exc).__name__}: {exc}"}, status=500)

    wrapper.__name__ = view.__name__
    return wrapper


def candidates(args: dict) -> tuple[list[str], list[dict] | None]:
    """Node names offered, and the Node objects when kube-scheduler sent them (not cache-capable)."""
    nodes = args.get("nodes")
    if isinstance(nodes, dict):
        items = [item for item in nodes.get("items") or [] if isinstance(item, dict)]
        return [(item.get("metadata") or {}).get("name") or "" for item in items], items
    names = args.get("nodenames")
    if isinstance(names, list) and all(isinstance(name, str) for name in names):
        return names, None
    raise BadRequest("ExtenderArgs needs Nodes.items or NodeNames")


@guarded
def filter_view(args: dict) -> JsonResponse:
    pod = args.get("pod")
    if not isinstance(pod, dict) or not (pod.get("metadata") or {}).get("name"):
        raise BadRequest("ExtenderArgs.Pod with metadata.name is required")
    names, items = candidates(args)
    answer = filter_pod(pod, names)
    if answer.passthrough:
        passing = names
    else:
        passing = [answer.chosen] if answer.chosen else []
    body: dict[str, object] = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": answer.failed,
        "FailedAndUnresolvableNodes": answer.unresolvable,
        "Error": answer.error,
    }
    if items is not None:
        body["Nodes"] = {
            "metadata": {},
            "items": [item for item in items if (item.get("metadata") or {}).get("name") in passing],
        }
    else:
        body["NodeNames"] = passing
    return JsonResponse(body)


@guarded
def bind_view(args: dict) -> JsonResponse:
    fields = {key: args.get(key.lower()) for key in ("PodName", "PodNamespace", "PodUID", "Node")}
    for key in ("PodName", "Node"):
        if not isinstance(fields[key], str) or not fields[key]:
            raise BadRequest(f"ExtenderBindingArgs.{key} is required")
    binder = Binder(kube_api(), complete_phase=settings.HAMIADMIN.get("BIND_PHASE_SUCCESS", True))
    name, node = fields["PodName"], fields["Node"]
    assert isinstance(name, str) and isinstance(node, str)  # checked above
    error = bind_pod(binder, fields["PodNamespace"] or "default", name, fields["PodUID"] or "", node)
    return JsonResponse({"Error": error})
