"""Fields of the input serializers.

Strict fields do not coerce: a number is not a name, a string is not a number. Loose fields
take a value as sent, for the engine to check (its errors name the key at fault, as
`labels.zone`), and show in the schema the shape the engine expects.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float) or data != int(data):
            self.fail("invalid")
        return super().to_internal_value(int(data))


@extend_schema_field(serializers.DictField(child=serializers.CharField(allow_blank=True)))
class StringMapField(serializers.DictField):
    """Labels or annotations: an object of strings, taken as sent (the engine checks the values)."""


def max_length(model, field: str) -> int:
    """A column's size, so an input refuses what the database could not store."""
    return model._meta.get_field(field).max_length
