"""Request bodies: JSON only, bounded in size and nesting, so bad input is a 4xx and never a 500."""

from __future__ import annotations

import io
from typing import cast

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.parsers import JSONParser


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "body_too_large"


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser behind a size check (DATA_UPLOAD_MAX_MEMORY_SIZE, which DRF's parsers
    do not apply) and with too-deep nesting turned into a parse error instead of a crash. A
    NUL character anywhere is a 400 naming where (`refuses_nul`)."""

    #: False for bodies whose items are answered one by one (`ItemwiseJSONParser`).
    refuses_nul = True

    def limit(self) -> tuple[int | None, str]:
        """The largest body in bytes, and the variable that sets it."""
        return settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "HAMI_MAX_BODY_BYTES"

    def parse(self, stream, media_type=None, parser_context=None):
        limit, variable = self.limit()
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        too_large = BodyTooLarge(f"Request body larger than {limit} bytes ({variable}).")
        try:
            if limit is not None and declared and int(declared) > limit:
                raise too_large
        except ValueError:
            raise ParseError("Content-Length is not a number.") from None
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise too_large
        try:
            body = super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
        where = nul_character_at(body) if self.refuses_nul else None
        if where is not None:
            raise ValidationError(
                {where or "non_field_errors": ["must not contain NUL (\\u0000) characters"]}
            )
        return body


class ItemwiseJSONParser(BoundedJSONParser):
    """The bulk endpoints' bodies: a NUL in one item refuses that item only (the view checks each
    item with `nul_character_at`), as every other fault of an item does."""

    refuses_nul = False


class ScenarioParser(BoundedJSONParser):
    """A simulation scenario: bounded by HAMI_SIMULATE_MAX_BODY_BYTES instead."""

    def limit(self) -> tuple[int | None, str]:
        return cast(int, settings.HAMIADMIN["SIMULATE_MAX_BODY_BYTES"]), "HAMI_SIMULATE_MAX_BODY_BYTES"


def nul_character_at(body) -> str | None:
    """The path of a string (value or key) holding a NUL character, which no name
    needs and PostgreSQL cannot store; None if there is none. Iterative: bodies may be deep."""
    stack = [("", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return path
        elif isinstance(value, dict):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                if "\x00" in key:
                    return child.replace("\x00", "\\u0000")
                stack.append((child, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
    return None
