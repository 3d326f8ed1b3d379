"""Request bodies: JSON only, bounded in size and nesting, so bad input is a 4xx and never a 500."""

from __future__ import annotations

import io

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "body_too_large"


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser behind a size check (DATA_UPLOAD_MAX_MEMORY_SIZE, which DRF's parsers
    do not apply) and with too-deep nesting turned into a parse error instead of a crash."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        too_large = BodyTooLarge(f"Request body larger than {limit} bytes.")
        try:
            if limit is not None and declared and int(declared) > limit:
                raise too_large
        except ValueError:
            raise ParseError("Content-Length is not a number.") from None
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise too_large
        try:
            return super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
