"""Reads compiled once per shape.

A request's few single-row reads (a pod's row locked, the config in force, a released pod's
cards and flags) cost Django 0.3-1 ms of Python each to build and compile: more than the
database takes to run them, and most of what one-request-per-pod submission spends. A
`Statement` builds its queryset once per database and shape of values (how many of each),
with markers in place of the values, keeps the compiled SQL and where each value goes, and
runs that SQL again with the caller's values: the same rows, converted as Django converts
them, through the same cursor (its wrappers, query capture and lock timeouts included).

Values are strings and integers, alone or in lists and tuples (a list's length is part of
the shape); what else a queryset needs (a status, a datetime) is written into the build.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.db.models import QuerySet
from django.db.models.query import ModelIterable, ValuesIterable, get_related_populators
from django.db.transaction import TransactionManagementError


class _Marker(str):
    """A string value's stand-in: Django passes strings through to the parameters as they
    are, so the marker is found there by identity."""

    __slots__ = ()


#: The first integer marker: integer values stand in as FIRST_INT_MARKER + n, found by value;
#: positive and inside 32 bits, the range Django checks integer lookups against (a value
#: outside a column's range compiles to no SQL at all).
FIRST_INT_MARKER = 2_100_000_000


class Statement:
    """`build(*values)` (a queryset, model rows or `.values()`) compiled once per database and
    shape, run by `rows(*values)`: a list of model instances (with `select_related` rows
    attached) or of dicts, as iterating the built queryset would give."""

    #: The most shapes one statement keeps; others are compiled for their call alone.
    SHAPES = 64

    def __init__(self, build: Callable[..., QuerySet], *, most: int | None = None):
        """`most`: a call with more values than this runs the built queryset as Django runs
        it, its shape not kept (a batch's shapes would take the places of a request's)."""
        self._build = build
        self._most = most
        self._compiled: dict[tuple, _Compiled] = {}
        self._lock = threading.Lock()

    def rows(self, *values: Any, using: str = "default") -> list:
        leaves: list = []
        shape = _shape(values, leaves)
        if self._most is not None and len(leaves) > self._most:
            return list(self._build(*values).using(using))
        key = (using, shape)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = _Compiled.of(self._build, values, using)
            with self._lock:
                if len(self._compiled) < self.SHAPES:
                    self._compiled.setdefault(key, compiled)
        return compiled.run(leaves)

    def first(self, *values: Any, using: str = "default"):
        """The first row, or None (build the queryset with its order and `[:1]`)."""
        found = self.rows(*values, using=using)
        return found[0] if found else None


def _shape(value: Any, leaves: list) -> Any:
    """The shape of `value` (the type of each leaf, the length of each list), its leaves
    appended to `leaves` in order; TypeError for a value that is neither."""
    if isinstance(value, list | tuple):
        return tuple(_shape(item, leaves) for item in value)
    if type(value) is str or type(value) is int:
        leaves.append(value)
        return type(value).__name__
    raise TypeError(
        f"a Statement value must be a string, an integer or a list of them, not {type(value).__name__}"
    )


def _marked(value: Any, markers: list) -> Any:
    """`value` with each leaf replaced by a new marker, appended to `markers`."""
    if isinstance(value, list | tuple):
        return type(value)(_marked(item, markers) for item in value)
    marker = (
        _Marker(f"\x00statement-value-{len(markers)}")
        if type(value) is str
        else FIRST_INT_MARKER + len(markers)
    )
    markers.append(marker)
    return marker


class _Compiled:
    """One shape's SQL, where each value goes in its parameters, and how rows become
    objects (the compiler's select, converters and, for models, related populators)."""

    def __init__(
        self,
        sql: str,
        params: list,
        slots: list[tuple[int, type | None] | None],
        compiler,
        using: str,
        for_update: bool,
        values: bool,
    ):
        self.sql, self.params, self.slots = sql, params, slots
        self.using, self.for_update = using, for_update
        select = compiler.select
        self.converters = compiler.get_converters([column for column, _, _ in select])
        self.klass_info = None if values else compiler.klass_info
        if self.klass_info is not None:
            fields = self.klass_info["select_fields"]
            self.model_span = (fields[0], fields[-1] + 1)
            self.init_list = [column.target.attname for column, _, _ in select[fields[0] : fields[-1] + 1]]
            self.annotations = dict(compiler.annotation_col_map or {})
            self.populators = get_related_populators(self.klass_info, select, using)  # type: ignore[call-arg]
        else:
            query = compiler.query
            self.names = [*query.extra_select, *query.values_select, *query.annotation_select]

    @classmethod
    def of(cls, build: Callable[..., QuerySet], values: tuple, using: str) -> _Compiled:
        markers: list = []
        queryset = build(*_marked(values, markers)).using(using)
        query = queryset.query
        compiler = query.get_compiler(using=using)
        sql, params = compiler.as_sql()
        where = {id(marker): index for index, marker in enumerate(markers) if type(marker) is _Marker}
        numbers = {marker: index for index, marker in enumerate(markers) if type(marker) is int}
        slots: list[tuple[int, type | None] | None] = []
        for param in params:
            if type(param) is _Marker:
                slots.append((where[id(param)], None))
            elif isinstance(param, int) and param in numbers:
                # as the field adapted it (psycopg's Int4 for an integer column on PostgreSQL)
                slots.append((numbers[param], None if type(param) is int else type(param)))
            else:
                slots.append(None)
        missing = set(range(len(markers))) - {slot[0] for slot in slots if slot is not None}
        if missing:
            raise ValueError(f"value {min(missing)} of this Statement is not a parameter of its SQL: {sql}")
        if queryset._iterable_class not in (ModelIterable, ValuesIterable):
            raise ValueError("a Statement builds model rows or .values() rows")
        as_values = queryset._iterable_class is ValuesIterable
        return cls(sql, list(params), slots, compiler, using, bool(query.select_for_update), as_values)

    def _converted(self, row: tuple, connection) -> list:
        converted = list(row)
        for position, (converters, expression) in self.converters.items():
            value = converted[position]
            for converter in converters:
                value = converter(value, expression, connection)
            converted[position] = value
        return converted

    def run(self, leaves: list) -> list:
        connection = connections[self.using]
        if self.for_update and connection.get_autocommit():
            raise TransactionManagementError("select_for_update cannot be used outside of a transaction.")
        params = [
            param if slot is None else leaves[slot[0]] if slot[1] is None else slot[1](leaves[slot[0]])
            for param, slot in zip(self.params, self.slots, strict=True)
        ]
        with connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            rows = cursor.fetchall()
        if self.converters:
            rows = [self._converted(row, connection) for row in rows]
        if self.klass_info is None:
            return [dict(zip(self.names, row, strict=True)) for row in rows]
        model, (start, end) = self.klass_info["model"], self.model_span
        found = []
        for row in rows:
            instance = model.from_db(self.using, self.init_list, row[start:end])
            for populator in self.populators:
                populator.populate(row, instance)
            for name, position in self.annotations.items():
                setattr(instance, name, row[position])
            found.append(instance)
        return found
