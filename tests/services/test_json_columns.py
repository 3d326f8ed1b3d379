"""The JSON columns' field (`models.fields.JSONField`): reads as Django's own reads, with empty
objects and lists taken without the parser, each read a new object."""

from __future__ import annotations

import json

import pytest
from django.db import connection, models
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.models import Node, Pod
from scheduling.models.fields import JSONField

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)

OURS, DJANGOS = JSONField(), models.JSONField()


@settings(max_examples=500, deadline=None)
@given(value=JSON)
def test_a_text_reads_as_djangos_field_reads_it(value):
    text = json.dumps(value)
    ours, theirs = OURS.from_db_value(text, None, connection), DJANGOS.from_db_value(text, None, connection)
    assert ours == theirs and type(ours) is type(theirs)


@pytest.mark.parametrize("text", ["{}", "[]", "null", '"{}"', '"[]"', "0", "", "{ }", "not json"])
def test_the_texts_it_reads_without_the_parser_and_those_it_does_not(text):
    assert OURS.from_db_value(text, None, connection) == DJANGOS.from_db_value(text, None, connection)
    assert OURS.from_db_value(None, None, connection) is None


def test_each_empty_read_is_a_new_object():
    first, second = OURS.from_db_value("{}", None, connection), OURS.from_db_value("{}", None, connection)
    first["changed"] = 1
    assert second == {} and first is not second


def test_it_deconstructs_as_djangos_field_so_migrations_see_nothing():
    assert OURS.deconstruct()[1] == "django.db.models.JSONField"


@pytest.mark.django_db
def test_rows_written_and_read_back_through_the_database():
    Node.objects.create(
        name="n1", labels={}, annotations={"a": {"b": []}}, taints=[], allocatable={"cpu": "4"}
    )
    row = Node.objects.values_list("labels", "annotations", "taints", "allocatable").get(name="n1")
    assert row == ({}, {"a": {"b": []}}, [], {"cpu": "4"})
    assert isinstance(Pod._meta.get_field("labels"), JSONField)
