"""Fields of the serializers, and the one rule for what the API writes out.

Strict fields do not coerce: a number is not a name, a string is not a number. Loose fields
take a value as sent, for the engine to check (its errors name the key at fault, as
`labels.zone`), and show in the schema the shape the engine expects.

Output: an absent value is `null`, never "" nor a missing key (`OptionalTextField`); a
duration is in milliseconds rounded to 0.01 (`MillisecondsField`, `round_ms`) and a score
rounded to 1e-6 (`ScoreField`, `round_score`). `OutputModelSerializer` applies both to the
model columns by kind, so a new list serializer gets them without asking.
"""

from __future__ import annotations

import copy

from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

#: Decimal places of durations (milliseconds) and scores in API output.
MS_PLACES, SCORE_PLACES = 2, 6


def round_ms(value: float | None) -> float | None:
    """A duration in milliseconds as the API writes it: to 0.01 ms, null stays null."""
    return None if value is None else round(float(value), MS_PLACES)


def round_score(value: float | None) -> float | None:
    """A score as the API writes it: to 1e-6, null stays null."""
    return None if value is None else round(float(value), SCORE_PLACES)


class OptionalTextField(serializers.CharField):
    """Text a row may lack (stored as ""): written out as null. Output only."""

    def __init__(self, **kwargs):
        kwargs["read_only"] = True
        kwargs["allow_null"] = True
        kwargs.pop("allow_blank", None)
        super().__init__(**kwargs)

    def to_representation(self, value):
        return None if value in ("", None) else super().to_representation(value)


class MillisecondsField(serializers.FloatField):
    """A duration in milliseconds, rounded to 0.01. Output only."""

    def __init__(self, **kwargs):
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value):
        return round_ms(value)


class ScoreField(serializers.FloatField):
    """A score, rounded to 1e-6. Output only."""

    def __init__(self, **kwargs):
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value):
        return round_score(value)


class BuiltOnceSerializer(serializers.Serializer):
    """A serializer whose declared fields are built once per class, each instance binding
    shallow copies of them: DRF re-initialises every declared field for every instance (a
    tenth of a `POST pods/`'s CPU). For fields that keep nothing of a request while they
    validate: a copy shares its validators, messages and child field (whose root is then the
    unbound prototype, with no context)."""

    def get_fields(self):
        built = type(self).__dict__.get("_prototype_fields")
        if built is None:
            built = super().get_fields()
            type(self)._prototype_fields = built
        return {name: copy.copy(field) for name, field in built.items()}


class OutputModelSerializer(serializers.ModelSerializer):
    """A read-only model serializer that writes absent text as null and durations rounded:
    a text column that may be blank (and has no choices) becomes an `OptionalTextField`, a
    float column named `*_ms` a `MillisecondsField`.

    The fields are built from the model once per class, and each instance gets copies:
    DRF introspects the model on every instance, a fifth of a pod answer's CPU."""

    def get_fields(self):
        built = type(self).__dict__.get("_built_fields")
        if built is None:
            built = super().get_fields()
            type(self)._built_fields = built
        return copy.deepcopy(built)

    def build_standard_field(self, field_name, model_field):
        field_class, kwargs = super().build_standard_field(field_name, model_field)
        if (
            isinstance(model_field, models.CharField | models.TextField)
            and model_field.blank
            and not model_field.choices
        ):
            return OptionalTextField, {
                key: value for key, value in kwargs.items() if key not in ("max_length", "allow_blank")
            }
        if isinstance(model_field, models.FloatField) and field_name.endswith("_ms"):
            return MillisecondsField, {
                key: value for key, value in kwargs.items() if key not in ("min_value", "max_value")
            }
        return field_class, kwargs


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
