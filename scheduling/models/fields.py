"""Model fields of our own."""

from __future__ import annotations

import re

import orjson
from django.db import models

#: A run of 19 digits: a number that may not fit 64 bits, which orjson would read as a float
#: where `json.loads` keeps the integer (a digit run inside a string only costs the slow path).
_LONG_DIGITS = re.compile(r"\d{19}")


class JSONField(models.JSONField):
    """Django's JSONField, read by orjson: a worker's cycle reads the JSON columns of a
    thousand pods, and `json.loads` was ~5% of its wall time (issue 29). What orjson reads
    differently from `json.loads` goes to Django's own reading: text it refuses (NaN,
    Infinity, lone surrogates) and integers that may not fit 64 bits. Written and migrated as
    Django's own field (`deconstruct`): the schema and the migrations do not see it."""

    def from_db_value(self, value, expression, connection):
        if type(value) is str and self.decoder is None and _LONG_DIGITS.search(value) is None:
            try:
                return orjson.loads(value)
            except orjson.JSONDecodeError:
                pass
        return super().from_db_value(value, expression, connection)

    def deconstruct(self):
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs
