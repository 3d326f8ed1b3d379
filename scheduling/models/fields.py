"""Model fields read faster than Django's own."""

from __future__ import annotations

from django.db import models

#: The JSON texts of an empty object and list, as both backends hand them back.
_EMPTY = {"{}": dict, "[]": list}


class JSONField(models.JSONField):
    """Django's JSONField, with empty objects and lists read without the JSON parser.

    Most of a pod's JSON columns (init containers, labels, scheduling terms) are empty, and a
    cycle reads thousands of rows of them: `json.loads("{}")` costs ~0.9 us against ~0.1 for
    the lookup (issue 29). Anything else reads as Django reads it. It deconstructs as Django's
    field, so migrations see no change."""

    def from_db_value(self, value, expression, connection):
        if value.__class__ is str and self.decoder is None:
            empty = _EMPTY.get(value)
            if empty is not None:
                return empty()
        return super().from_db_value(value, expression, connection)

    def deconstruct(self):
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs
