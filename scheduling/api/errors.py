"""One exception handler: engine and model errors become 4xx answers keyed by the field at fault.

`PodInvalid.field` and `ScenarioError.where` are already paths into the request body
(``containers[0].resources.limits.nvidia.com/gpucores``, ``nodes[1].devices[0].uuid``),
so they are used as the error keys unchanged; `FieldProblems` keys every bad field at once.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

from scheduling.engine.errors import PodInvalid, ScenarioError
from scheduling.services.fields import FieldProblems
from scheduling.services.pods import QueueGone

from .parsers import BodyTooLarge


class WriteConflict(exceptions.APIException):
    """409: the write raced another that changed what it depends on (`QueueGone`)."""

    status_code = 409
    default_detail = "The write raced another one; try again."
    default_code = "conflict"


def field_error(field: str, message: str) -> exceptions.ValidationError:
    return exceptions.ValidationError({field or api_settings.NON_FIELD_ERRORS_KEY: [message]})


def problems_error(problems) -> exceptions.ValidationError:
    """Every bad field at once, each keyed by its path (one field may have several)."""
    keyed: dict[str, list[str]] = {}
    for field, message in problems:
        keyed.setdefault(field or api_settings.NON_FIELD_ERRORS_KEY, []).append(message)
    return exceptions.ValidationError(keyed)


def translate(exc: Exception) -> Exception:
    if isinstance(exc, RequestDataTooBig):
        return BodyTooLarge(
            f"Request body larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes (HAMI_MAX_BODY_BYTES)."
        )
    if isinstance(exc, FieldProblems):
        return problems_error(exc.problems)
    if isinstance(exc, QueueGone):
        return WriteConflict({exc.field: [exc.message]})
    if isinstance(exc, PodInvalid):
        return field_error(exc.field, exc.message)
    if isinstance(exc, ScenarioError):
        return field_error(exc.where, exc.message)
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return exceptions.ValidationError(
                {key: [str(m) for m in errors] for key, errors in exc.message_dict.items()}
            )
        return exceptions.ValidationError({api_settings.NON_FIELD_ERRORS_KEY: exc.messages})
    if isinstance(exc, ObjectDoesNotExist):
        return exceptions.NotFound(str(exc) or "Not found.")
    return exc


def exception_handler(exc, context):
    return drf_exception_handler(translate(exc), context)
