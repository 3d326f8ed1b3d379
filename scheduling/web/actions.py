"""Operator actions on the dashboard: cordon or uncordon a card or a node, drain a node,
requeue or delete a pod. Each URL answers GET with a confirmation page (what will happen, to what) and POST
with the action itself, through `scheduling.services` (audited there), a message, and a
redirect to the page it was asked from. Operators and admins only; a viewer gets a 403
naming the role needed.
"""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from scheduling import services
from scheduling.models import Card, Node, Pod
from scheduling.roles import OPERATOR, has_role


def operator_required(view):
    """Signed in (else redirect to login) and at least an operator (else 403 naming it)."""

    @wraps(view)
    def guarded(request, *args, **kwargs):
        if not has_role(request.user, OPERATOR):
            raise PermissionDenied(
                "This needs the operator role; an admin can add you to the operator group."
            )
        return view(request, *args, **kwargs)

    return login_required(never_cache(require_http_methods(["GET", "POST"])(guarded)))


def _confirm(request, title: str, consequence: str, back: str):
    return render(
        request, "scheduling/confirm.html", {"title": title, "consequence": consequence, "back": back}
    )


def _confirmed(request) -> bool:
    return request.method == "POST" and request.POST.get("confirm") == "yes"


@operator_required
def card_cordon(request, uuid: str, on: bool):
    card = get_object_or_404(Card.objects.select_related("node"), uuid=uuid)
    back = reverse("node", args=[card.node.name])
    verb = "Cordon" if on else "Uncordon"
    if not _confirmed(request):
        consequence = (
            f"{card.uuid} (#{card.index} on {card.node.name}) takes no new pods; its tenants stay."
            if on
            else f"{card.uuid} (#{card.index} on {card.node.name}) takes new pods again."
        )
        return _confirm(request, f"{verb} card {card.uuid}?", consequence, back)
    services.cordon_card_by(card.uuid, on, by=request.user.get_username())
    messages.success(request, f"{card.uuid} {verb.lower()}ed.")
    return redirect(back)


@operator_required
def node_cordon(request, name: str, on: bool):
    node = get_object_or_404(Node, name=name)
    back = reverse("node", args=[node.name])
    verb = "Cordon" if on else "Uncordon"
    if not _confirmed(request):
        cards = node.cards.count()
        consequence = (
            f"None of the {cards} cards of {node.name} takes new pods (a drain: what runs there stays, "
            "listed on the node page)."
            if on
            else f"All {cards} cards of {node.name} take new pods again."
        )
        return _confirm(request, f"{verb} node {node.name}?", consequence, back)
    changed = services.cordon_node(node.name, on, by=request.user.get_username())
    messages.success(request, f"{node.name}: {changed} card{'s' if changed != 1 else ''} {verb.lower()}ed.")
    return redirect(back)


@operator_required
def node_drain(request, name: str):
    """Drain: the confirmation lists what runs on the node and offers to requeue the pods
    hamiadmin runs itself; the POST cordons every card (and requeues them, if ticked)."""
    node = get_object_or_404(Node, name=name)
    back = reverse("node", args=[node.name])
    if not _confirmed(request):
        placed = services.running_on(node)
        own = services.requeueable(placed)
        return render(
            request,
            "scheduling/drain.html",
            {
                "title": f"Drain node {node.name}?",
                "node": node,
                "cards": node.cards.count(),
                "placed": placed,
                "own": {pod.pk for pod in own},
                "own_count": len(own),
                "back": back,
            },
        )
    drain = services.drain_node(
        node.name, by=request.user.get_username(), requeue_own=request.POST.get("requeue") == "yes"
    )
    messages.success(request, f"{node.name} drained: {drain.message}.")
    return redirect(back)


@operator_required
def pod_requeue(request, namespace: str, name: str):
    pod = get_object_or_404(Pod, namespace=namespace, name=name)
    back = reverse("pod", args=[namespace, name])
    if not _confirmed(request):
        return _confirm(
            request, f"Requeue {pod.key}?", "It is tried in the next cycle, its back-off cleared.", back
        )
    try:
        services.requeue_pod_by(pod, by=request.user.get_username())
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{pod.key} requeued.")
    return redirect(back)


@operator_required
def pod_delete(request, namespace: str, name: str):
    pod = get_object_or_404(Pod, namespace=namespace, name=name)
    back = reverse("pod", args=[namespace, name])
    if not _confirmed(request):
        return _confirm(
            request,
            f"Delete {pod.key}?",
            "hamiadmin forgets the pod (status deleted) and gives back the cards it holds; "
            "it cannot be undone. The Kubernetes pod, if any, is not deleted.",
            back,
        )
    services.delete_pod_by(pod, by=request.user.get_username())
    messages.success(request, f"{pod.key} deleted; its cards were given back.")
    return redirect(back)
