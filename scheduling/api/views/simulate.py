"""`simulate/`: run a scenario through the engine, at once or in the background."""

from __future__ import annotations

import gzip
import re
from typing import cast

from django.core.cache import BaseCache, caches
from django.http import HttpResponse
from django.urls import reverse
from django.utils.connection import ConnectionProxy
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle, UserRateThrottle
from rest_framework.views import APIView

from scheduling.api import serializers as s
from scheduling.api.parsers import ScenarioParser
from scheduling.engine.budget import OverBudget
from scheduling.engine.errors import MAX_PROBLEMS, ScenarioProblems
from scheduling.roles import VIEWER
from scheduling.services import simulations

from .base import ERRORS, REFUSED, RoleView


class ScenarioTooBig(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Scenario too big to simulate."
    default_code = "scenario_too_big"


class SimulationsBusy(APIException):
    """This process runs HAMI_SIMULATE_SYNC_CONCURRENCY simulations already: answered at once,
    so a viewer never holds a web thread waiting for one."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Simulations busy; try again shortly."
    default_code = "simulations_busy"

    def __init__(self, detail=None):
        super().__init__(detail)
        self.wait = 1


def _refuse_above_max(work: simulations.Work) -> None:
    limit = simulations.option("SIMULATE_MAX_WORK")
    if work.units > limit:
        raise ScenarioTooBig(
            f"Scenario too big to simulate: {work}, more than HAMI_SIMULATE_MAX_WORK ({limit})."
        )


def every_problem(exc: ScenarioProblems) -> ValidationError:
    """A 400 naming every problem of a malformed scenario, keyed by where each is (several
    at one place are listed together), and how many more were only counted."""
    errors: dict[str, list[str]] = {}
    for problem in exc.problems:
        errors.setdefault(problem.where or api_settings.NON_FIELD_ERRORS_KEY, []).append(problem.message)
    if exc.total > len(exc.problems):
        errors.setdefault(api_settings.NON_FIELD_ERRORS_KEY, []).append(
            f"and {exc.total - len(exc.problems)} more problems"
        )
    return ValidationError(errors)


class QueuedSimulationThrottle(UserRateThrottle):
    """Simulations sent to the background, per user, counted by every process together."""

    scope = "simulate-queued"
    cache = cast(BaseCache, ConnectionProxy(caches, "shared"))


class SimulateView(RoleView, APIView):
    """Run a scenario through the engine; nothing is read from or written to the cluster.
    Small scenarios are answered in the request, big ones in the background
    (scheduling.services.simulations)."""

    write_role = VIEWER
    parser_classes = [ScenarioParser]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "simulate"

    @extend_schema(
        tags=["simulate"],
        request=s.ScenarioSerializer,
        parameters=[
            OpenApiParameter(
                "top",
                {"type": "integer", "minimum": 1},
                required=False,
                description="keep the K best node scores and K failed nodes per pod",
            )
        ],
        responses={
            200: s.SimulationSerializer,
            202: OpenApiResponse(s.SimulationJobSerializer, description="queued: read the result at `url`"),
            400: ERRORS,
            413: ERRORS,
            415: ERRORS,
            429: ERRORS,
            503: ERRORS,
            **REFUSED,
        },
        description=(
            "The same JSON as `manage.py simulate`. A malformed scenario is a 400 naming every "
            f"problem (up to {MAX_PROBLEMS}, then `non_field_errors` counts the rest), keyed by "
            "where each is, e.g. `nodes[1].devices[0].uuid`. Work is pods x (nodes + cards) plus "
            "topology-aware's combination steps: up to HAMI_SIMULATE_SYNC_MAX_WORK the answer comes "
            "at once (200; a run past HAMI_SIMULATE_SYNC_SECONDS is a 413, and while this process "
            "runs HAMI_SIMULATE_SYNC_CONCURRENCY already, a 503 with Retry-After); up to "
            "HAMI_SIMULATE_MAX_WORK the simulation is queued (202, `url` gives its status and "
            "result); above, or a body over HAMI_SIMULATE_MAX_BODY_BYTES, 413 naming the limit."
        ),
    )
    def post(self, request):
        top = request.query_params.get("top")
        if top is not None:
            if not top.isdigit() or int(top) < 1:
                raise ValidationError({"top": ["must be a positive integer"]})
            top = int(top)
        _refuse_above_max(simulations.measure(request.data))  # before reading a huge one
        try:
            work = simulations.weigh(request.data)  # a malformed scenario is a 400 now
        except ScenarioProblems as exc:
            raise every_problem(exc) from None
        _refuse_above_max(work)
        if work.units <= simulations.option("SIMULATE_SYNC_MAX_WORK"):
            try:
                return Response(simulations.run_now(request.data, top))
            except ScenarioProblems as exc:
                raise every_problem(exc) from None
            except OverBudget as exc:
                raise ScenarioTooBig(
                    f"Scenario too big to simulate in the request: {work}, {exc}; "
                    "HAMI_SIMULATE_SYNC_MAX_WORK sends bigger ones to the background."
                ) from None
            except simulations.SimulationsBusy as exc:
                raise SimulationsBusy(str(exc)) from None
        throttle = QueuedSimulationThrottle()
        if not throttle.allow_request(request, self):
            self.throttled(request, throttle.wait())
        job = simulations.submit(request.data, top, request.user.pk, work)
        url = request.build_absolute_uri(reverse("api:simulation", args=[job["id"]]))
        answer = s.SimulationJobSerializer({**simulations.public(job), "url": url}).data
        return Response(answer, status=status.HTTP_202_ACCEPTED, headers={"Location": url})


_ACCEPTS_GZIP = re.compile(r"\bgzip\b")
_JOB_ID = re.compile(r"[0-9a-f]{32}")


class SimulationView(RoleView, APIView):
    """A simulation queued by `POST simulate/`: its status, and its result once done.
    Only the user who posted it sees it, for HAMI_SIMULATE_RESULT_SECONDS."""

    @extend_schema(
        operation_id="simulate_result",
        tags=["simulate"],
        responses={200: s.SimulationJobSerializer, 404: ERRORS, **REFUSED},
        description=(
            "`status` is queued, running, done (with `result`, the same JSON as a simulation "
            "answered at once) or failed (with `error`). Sent gzip-encoded to clients that accept it."
        ),
    )
    def get(self, request, job):
        state = simulations.read(job) if _JOB_ID.fullmatch(job) else None
        if state is None or state["owner"] != request.user.pk:
            raise NotFound("No such simulation: it expired, or it is not yours.")
        if state["status"] != simulations.SimulationStatus.DONE:
            return Response(s.SimulationJobSerializer(simulations.public(state)).data)
        document = state["document"]
        if _ACCEPTS_GZIP.search(request.headers.get("Accept-Encoding", "")):
            response = HttpResponse(document, content_type="application/json")
            response["Content-Encoding"] = "gzip"
        else:
            response = HttpResponse(gzip.decompress(document), content_type="application/json")
        response["Vary"] = "Accept-Encoding"
        return response
