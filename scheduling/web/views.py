"""Dashboard pages. Thin: read parameters, ask `scheduling.web.queries`, render.

Every page needs a signed-in user with a role (viewer or above, as in the REST API);
anonymous visitors are sent to the login page.
"""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from scheduling.roles import OPERATOR, VIEWER, has_role
from scheduling.web import live as live_parts
from scheduling.web import queries
from scheduling.web.preemption import evictions_page


def render_live(request, template_name, build, *args):
    """Render a page that refreshes itself. It carries the version read *before* its content,
    so a change landing while the page is built makes the next poll redraw it. Asked by
    `live.js` (`X-Live: 1`), it answers with only the parts that changed (`web.live`)."""
    version = queries.fingerprint()
    context = build(*args)
    context["live_version"] = version
    context["can_operate"] = has_role(request.user, OPERATOR)
    response = render(request, template_name, context)
    patch_vary_headers(response, ["X-Live"])
    if live_parts.wants_parts(request) and response.status_code == 200:
        role = "operator" if context["can_operate"] else "viewer"
        answer = live_parts.parts_response(request, response.content.decode(), version, role)
        patch_vary_headers(answer, ["X-Live"])
        return answer
    return response


def viewer_required(view):
    """Signed in (else redirect to login) and at least a viewer (else 403)."""

    @wraps(view)
    def guarded(request, *args, **kwargs):
        if not has_role(request.user, VIEWER):
            raise PermissionDenied(
                "Your account has no dashboard role; an admin can add you to the viewer group."
            )
        return view(request, *args, **kwargs)

    return login_required(never_cache(guarded))


@require_GET
@viewer_required
def home(request):
    """The Cluster page: every node and card, with usage, tenants and badges."""
    return render_live(request, "scheduling/cluster.html", queries.cluster_page, request)


@require_GET
@viewer_required
def pending(request):
    return render_live(request, "scheduling/pending.html", queries.pending_page, request.GET)


@require_GET
@viewer_required
def pods(request):
    """Every pod, paged and sortable, filtered by status, namespace, node and name."""
    return render_live(request, "scheduling/pods.html", queries.pods_page, request)


@require_GET
@viewer_required
def pod(request, namespace, name):
    return render_live(
        request, "scheduling/pod.html", queries.pod_page, namespace, name, request.GET.get("decision")
    )


@require_GET
@viewer_required
def node(request, name):
    return render_live(request, "scheduling/node.html", queries.node_page, name)


@require_GET
@viewer_required
def cycles(request):
    return render_live(request, "scheduling/cycles.html", queries.cycles_page)


@require_GET
@viewer_required
def evictions(request):
    """Every eviction (preempt, reclaim, consolidate), filtered like `GET /api/v1/evictions/`."""
    return render_live(request, "scheduling/evictions.html", evictions_page, request.GET)


@require_GET
@viewer_required
def events(request):
    """The latest refusals and repairs (objects the kube agent could not take in, and so on)."""
    return render(request, "scheduling/events.html", queries.events_page(request.GET))


@require_http_methods(["GET", "POST"])
@viewer_required
def simulator(request):
    """Paste or upload a scenario (SPEC 9) and see each pod's decision path; nothing is stored."""
    if request.method == "POST" and request.POST.get("live"):
        simulation = queries.simulate_live(request.POST.get("scenario", ""))
    elif request.method == "POST":
        simulation = queries.simulate(request.POST.get("scenario", ""), request.FILES.get("scenario_file"))
    elif request.GET.get("example"):
        simulation = queries.simulate_example(request.GET["example"])
    else:
        simulation = queries.Simulation()
    return render(
        request,
        "scheduling/simulator.html",
        {"simulation": simulation, "examples": queries.EXAMPLES},
        status=400 if simulation.error else 200,
    )


@require_GET
@viewer_required
def live(request):
    """A small token that changes when the cluster does; pages poll it and reload their content."""
    return JsonResponse({"version": queries.fingerprint()})
