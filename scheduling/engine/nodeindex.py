"""A shape's fitting nodes in SPEC 7's node order, kept sorted as nodes change.

`NodeIndex` keeps `(sign x score, name)` keys sorted and bisects them, so a decision reads
the K best nodes without sorting the cluster; `order_nodes` is the same order by sorting,
for lists built once.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from operator import itemgetter
from typing import TypeVar

import numpy as np

from .chain import TOLERANCE
from .columns import Swept
from .evaluate import NodeVerdict
from .fit import NodeFailure


def order_nodes(keyed: list[tuple[float, str, float]]) -> list[tuple[str, float]]:
    """Policy order from `(sign x score, name, score)` entries (sign -1 for binpack: high first);
    scores within 1e-9 tie and go by name.

    Sorting on exact values is right unless two neighbours differ by less than the
    tolerance without being equal; only such runs are re-sorted by name. `NodeIndex` keeps
    the same order without sorting per decision.
    """
    keyed.sort()
    near = [i for i in range(1, len(keyed)) if 0 < keyed[i][0] - keyed[i - 1][0] < TOLERANCE]
    if near:
        start = 0
        out: list[tuple[float, str, float]] = []
        for i in range(1, len(keyed) + 1):
            if i == len(keyed) or keyed[i][0] - keyed[start][0] >= TOLERANCE:
                out.extend(sorted(keyed[start:i], key=lambda item: item[1]))
                start = i
        keyed = out
    return [(name, score) for _, name, score in keyed]


#: a fitting node's name in its `NodeIndex.fit_keys` entry
_name = itemgetter(1)
_Entry = TypeVar("_Entry", tuple[float, str], tuple[str, float])


class _Packed:
    """A sorted list of pairs kept as two arrays until it must change: `(first[i], second[i])`
    read as a tuple, with `second` mapped through `table` (a row index into node names, or a
    failure id into a sweep's failures). A new shape's index built from a sweep holds its
    fitting keys and failed entries this way: ~12 bytes a node instead of a tuple, a float and
    a list slot (~88), so 100 shapes cached at 50,000 nodes stay out of the heap until a shape
    is re-decided after a change (`NodeIndex.update` unpacks it then, once)."""

    __slots__ = ("first", "second", "table")

    def __init__(self, first: np.ndarray, second: np.ndarray, table) -> None:
        self.first, self.second, self.table = first, second, table

    def __len__(self) -> int:
        return len(self.first)

    def __bool__(self) -> bool:
        return len(self.first) > 0

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._pairs(self.first[i], self.second[i])
        first = self.first[i]
        return (first.item() if isinstance(first, np.generic) else first, self.table[int(self.second[i])])

    def __iter__(self):
        return iter(self.unpacked())

    def _pairs(self, first: np.ndarray, second: np.ndarray) -> list:
        table = self.table
        if isinstance(table, np.ndarray):
            seconds = table[second].tolist()
        else:
            seconds = list(map(table.__getitem__, second.tolist()))
        return list(zip(first.tolist(), seconds, strict=True))

    def unpacked(self) -> list:
        """The same pairs as a plain list."""
        return self._pairs(self.first, self.second)


class NodeIndex:
    """One pod shape under one node policy: every node's verdict, kept in the order a decision
    reads them, so a decision costs the nodes that changed since the last one, not a sweep.

    Fitting nodes are kept as `(sign x score, name)` keys, sorted (`fit_keys`: plain tuples, so
    finding a node's place compares them without a key function, and the score is `sign x`
    the first item again, exactly, as the sign is +-1), failed ones by name, the reason counts
    summed over the failed nodes; a changed node is taken out and put back with its new
    verdict. The 1e-9 rule of SPEC 7 only matters where two distinct scores are that close:
    the distinct scores and the set of those with a near successor (`near`) are kept too, so
    the ranking re-sorts by name only the runs `order_nodes` would re-sort, and exactly as it
    would: a run can never reach across a gap of 1e-9 or more, so its groups start where the
    run starts.
    """

    __slots__ = (
        "sign",
        "base",
        "position",
        "node_count",
        "held",
        "fit_keys",
        "fit_entries",
        "_fail_names",
        "fail_entries",
        "reasons",
        "carriers",
        "messages",
        "multiplicity",
        "values",
        "near",
        "_ranking",
    )

    def __init__(self, sign: float):
        self.sign = sign
        self.base: Swept | None = None  # the sweep it was built from: verdicts not in `held`
        self.position = -1  # TOUCHES position read up to; -1: never built
        self.node_count = -1
        self.held: dict[str, NodeVerdict] = {}
        self.fit_keys: list[tuple[float, str]] = []  # (sign x score, name) of the fitting nodes, sorted
        #: `(name, score)` beside each key, made on the first whole ranking asked (not kept to
        #: `top`) and kept in step from then on: a whole ranking is then a copy, not a rewrite
        self.fit_entries: list[tuple[str, float]] | None = None
        self._fail_names: list[str] | None = []
        self.fail_entries: list[tuple[str, NodeFailure]] = []
        self.reasons: dict[str, int] = {}  # reason -> its count summed over the failed nodes
        self.carriers: dict[str, int] = {}  # reason -> how many failed nodes name it
        #: a node rule's words (`noderules.RuleFailure.messages`) -> how many failed nodes say them
        self.messages: dict[str, int] = {}
        self.multiplicity: dict[float, int] = {}  # sign x score -> fitting nodes with it
        self.values: list[float] = []  # the distinct sign x scores, sorted
        self.near: set[float] = set()  # values whose next value is less than 1e-9 above
        self._ranking: list[tuple[str, float]] | None = None

    def rebuild(self, verdicts: list[tuple[str, NodeVerdict]]) -> None:
        """Every node afresh, `verdicts` in node-name order."""
        sign = self.sign
        self.base = None
        self.held = dict(verdicts)
        self.fit_keys = fit = sorted((sign * v.score, name) for name, v in verdicts if v.failure is None)
        self.fit_entries = None
        self.fail_entries = [(name, v.failure) for name, v in verdicts if v.failure is not None]
        self._fail_names = None
        reasons: dict[str, int] = {}
        carriers: dict[str, int] = {}
        messages: dict[str, int] = {}
        for _, failure in self.fail_entries:
            for reason, n in failure.reasons.items():
                reasons[reason] = reasons.get(reason, 0) + n
                carriers[reason] = carriers.get(reason, 0) + 1
            for message in getattr(failure, "messages", ()):
                messages[message] = messages.get(message, 0) + 1
        self.reasons, self.carriers, self.messages = reasons, carriers, messages
        multiplicity: dict[float, int] = {}
        for value, _ in fit:
            multiplicity[value] = multiplicity.get(value, 0) + 1
        self.multiplicity = multiplicity
        values = self.values = sorted(multiplicity)
        self.near = {values[i] for i in range(len(values) - 1) if values[i + 1] - values[i] < TOLERANCE}
        self._ranking = None

    def rebuild_swept(self, swept: Swept) -> None:
        """Every node afresh from a sweep (nodes in name order), as array operations: the
        verdict objects are made only for the nodes that change later (`update`), and the
        sorted keys, failed entries and distinct values stay arrays (`_Packed`) until then."""
        self.base = swept
        self.held = {}
        fits = swept.fits
        fit = np.flatnonzero(fits)
        values = self.sign * swept.score[fit]
        order = np.argsort(values, kind="stable")  # equal values stay by name
        fit, values = fit[order], values[order]
        names = swept.names
        # (value, name) as `rebuild` makes them: names by row
        self.fit_keys = _Packed(values, fit.astype(np.int32), names)  # type: ignore[assignment]
        self.fit_entries = None
        failed = np.flatnonzero(~fits)
        failures = swept.failures
        fail_ids = swept.fail_id[failed]
        self._fail_names = None
        self.fail_entries = _Packed(names[failed], fail_ids.astype(np.int32), failures)  # type: ignore[assignment]
        reasons: dict[str, int] = {}
        carriers: dict[str, int] = {}
        messages: dict[str, int] = {}
        for failure, nodes in zip(
            failures, np.bincount(fail_ids, minlength=len(failures)).tolist(), strict=True
        ):
            if nodes:
                for reason, n in failure.reasons.items():
                    reasons[reason] = reasons.get(reason, 0) + n * nodes
                    carriers[reason] = carriers.get(reason, 0) + nodes
                for message in getattr(failure, "messages", ()):
                    messages[message] = messages.get(message, 0) + nodes
        self.reasons, self.carriers, self.messages = reasons, carriers, messages
        if len(values):
            starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
            distinct = values[starts]
            sizes = np.diff(np.append(starts, len(values)))
        else:
            distinct = sizes = values
        # `values` and `multiplicity` as arrays too: made into a list and a dict by `_unpack`
        self.values = distinct  # type: ignore[assignment]
        self.multiplicity = sizes  # type: ignore[assignment]
        self.near = set(distinct[:-1][np.diff(distinct) < TOLERANCE].tolist())
        self._ranking = None

    def _unpack(self) -> None:
        """The packed lists of `rebuild_swept` as the plain lists and dict `_add` and `_remove`
        change in place (once per sweep, on the first update)."""
        if isinstance(self.fit_keys, _Packed):
            self.fit_keys = self.fit_keys.unpacked()
            self.fail_entries = self.fail_entries.unpacked()  # type: ignore[union-attr]
            self._fail_names = None
            values = self.values.tolist()  # type: ignore[attr-defined]
            self.multiplicity = dict(zip(values, self.multiplicity.tolist(), strict=True))  # type: ignore[attr-defined]
            self.values = values

    @property
    def fail_names(self) -> list[str]:
        """The failed nodes' names, sorted."""
        names = self._fail_names
        if names is None:
            entries = self.fail_entries
            if isinstance(entries, _Packed):
                names = self._fail_names = entries.first.tolist()
            else:
                names = self._fail_names = [name for name, _ in entries]
        return names

    def _held(self, name: str) -> NodeVerdict | None:
        verdict = self.held.get(name)
        if verdict is None and self.base is not None:
            i = self.base.position.get(name)
            if i is not None:
                verdict = self.base.verdict(i)
        return verdict

    def verdict_of(self, name: str) -> NodeVerdict | None:
        """The node's verdict as the index holds it (None: a node it does not know)."""
        return self._held(name)

    def update(self, name: str, verdict: NodeVerdict) -> None:
        """A node's verdict changed (or was re-evaluated): replace what the index holds for it.
        What it held is read off the sweep's columns without making a verdict of it; a node
        that fails as before, for the same counts, changes nothing summed or ordered (most
        re-checks of a changed node end so: then only the verdict held is replaced)."""
        held = self.held
        old = held.get(name)
        if old is not None:
            if old is verdict:
                return
            was, score = old.failure, old.score
        else:
            base = self.base
            i = base.position.get(name) if base is not None else None
            if i is None:  # a node it does not know
                was, score = None, None
            elif base.fits[i]:  # type: ignore[union-attr]
                was, score = None, float(base.score[i])  # type: ignore[union-attr]
            else:
                was, score = base.failures[int(base.fail_id[i])], None  # type: ignore[union-attr]
        failure = verdict.failure
        if failure is not None and was is not None and (was is failure or was == failure):
            held[name] = verdict  # the entry kept says the same
            return
        if isinstance(self.fit_keys, _Packed):
            self._unpack()
        if was is not None:
            self._remove_failed(name, was)
        elif score is not None:
            self._remove_fitting(name, score)
        self._add(name, verdict)
        self._ranking = None

    def _add(self, name: str, verdict: NodeVerdict) -> None:
        self.held[name] = verdict
        failure = verdict.failure
        if failure is not None:
            i = bisect_left(self.fail_names, name)
            self.fail_names.insert(i, name)
            self.fail_entries.insert(i, (name, failure))
            reasons, carriers = self.reasons, self.carriers
            for reason, n in failure.reasons.items():
                reasons[reason] = reasons.get(reason, 0) + n
                carriers[reason] = carriers.get(reason, 0) + 1
            for message in getattr(failure, "messages", ()):
                self.messages[message] = self.messages.get(message, 0) + 1
            return
        value = self.sign * verdict.score
        key = (value, name)
        keys = self.fit_keys
        i = bisect_left(keys, key)
        keys.insert(i, key)
        if self.fit_entries is not None:
            self.fit_entries.insert(i, (name, verdict.score))
        count = self.multiplicity.get(value, 0)
        self.multiplicity[value] = count + 1
        if count:
            return
        values, near = self.values, self.near
        j = bisect_left(values, value)
        values.insert(j, value)
        if j > 0:
            prev = values[j - 1]
            if value - prev < TOLERANCE:
                near.add(prev)
            else:
                near.discard(prev)
        if j + 1 < len(values) and values[j + 1] - value < TOLERANCE:
            near.add(value)

    def _remove_failed(self, name: str, failure: NodeFailure) -> None:
        """Take a failed node out (`_add` puts its new verdict in `held`)."""
        i = bisect_left(self.fail_names, name)
        del self.fail_names[i]
        del self.fail_entries[i]
        reasons, carriers = self.reasons, self.carriers
        for reason, n in failure.reasons.items():
            left = carriers[reason] - 1
            if left:
                carriers[reason] = left
                reasons[reason] -= n
            else:  # no failed node names it any more (a count may be 0: a node without cards)
                del carriers[reason], reasons[reason]
        messages = self.messages
        for message in getattr(failure, "messages", ()):
            left = messages[message] - 1
            if left:
                messages[message] = left
            else:
                del messages[message]

    def _remove_fitting(self, name: str, score: float) -> None:
        """Take a fitting node out (`_add` puts its new verdict in `held`)."""
        value = self.sign * score
        keys = self.fit_keys
        i = bisect_left(keys, (value, name))
        del keys[i]
        if self.fit_entries is not None:
            del self.fit_entries[i]
        count = self.multiplicity[value] - 1
        if count:
            self.multiplicity[value] = count
            return
        del self.multiplicity[value]
        values, near = self.values, self.near
        j = bisect_left(values, value)
        del values[j]
        near.discard(value)
        if j > 0:
            prev = values[j - 1]
            if j < len(values) and values[j] - prev < TOLERANCE:
                near.add(prev)
            else:
                near.discard(prev)

    def ranking(self, top: int | None = None) -> list[tuple[str, float]]:
        """`(name, score)` of the fitting nodes in policy order, as `order_nodes` gives it; with
        `top`, its first `top` entries only. Those cost `top`, not the fitting nodes: the index
        already holds them sorted on `(sign x score, name)`, and only the runs of near scores
        that start before `top` are re-sorted by name."""
        if top is not None:
            top = max(0, top)
        if self._ranking is not None:
            return self._ranking if top is None else self._ranking[:top]
        keys = self.fit_keys
        end = len(keys) if top is None else min(top, len(keys))
        sign = self.sign
        entries = self.fit_entries
        if top is None and entries is None:
            entries = self.fit_entries = [(name, sign * value) for value, name in keys]
        if entries is not None:
            out = self._named_runs(entries, end, None)
        else:  # the first `top` keys, read as entries
            out = [(name, sign * value) for value, name in self._named_runs(keys, end, _name)]
        if top is None:
            self._ranking = out
        return out

    def _named_runs(self, source: list[_Entry], end: int, by_name) -> list[_Entry]:
        """The first `end` of `source` (`fit_keys`, or `fit_entries` in step with them) with the
        runs of near scores re-sorted by name (`by_name` reads it; None: an entry's first item)."""
        kept = source[:end]
        if self.near:
            for low, high in self._runs():
                a, b, values = self._span(low, math.nextafter(high, math.inf))
                if a >= end:
                    break  # runs come in order: the rest lie past `top`
                whole = high - low < TOLERANCE  # one group: just by name
                start = a
                for i in range(a + 1, b + 1):
                    if i == b or (not whole and values[i - a] - values[start - a] >= TOLERANCE):
                        if i - start > 1:
                            stop = min(i, end)
                            kept[start:stop] = sorted(source[start:i], key=by_name)[: stop - start]
                        start = i
                        if start >= end:
                            break
        return kept

    def _span(self, low: float, high: float) -> tuple[int, int, list[float]]:
        """Where the fitting nodes with `low <= sign x score < high` sit, and their values."""
        keys = self.fit_keys
        a = bisect_left(keys, (low,))  # (low,) sorts before every (low, name)
        b = bisect_left(keys, (high,))
        return a, b, [value for value, _ in keys[a:b]]

    def _runs(self) -> list[tuple[float, float]]:
        """The runs of distinct values each less than 1e-9 above the one before: (first, last)."""
        values = self.values
        runs: list[tuple[float, float]] = []
        for value in sorted(self.near):
            after = float(values[bisect_left(values, value) + 1])
            if runs and runs[-1][1] == value:
                runs[-1] = (runs[-1][0], after)
            else:
                runs.append((value, after))
        return runs
