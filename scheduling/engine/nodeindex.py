"""A shape's fitting nodes in SPEC 7's node order, kept sorted as nodes change.

`NodeIndex` keeps `(sign x score, name)` keys sorted and bisects them, so a decision reads
the K best nodes without sorting the cluster; `order_nodes` is the same order by sorting,
for lists built once.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

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

    def seconds(self) -> list:
        """The second items of every pair, as a plain list."""
        table = self.table
        if isinstance(table, np.ndarray):
            return table[self.second].tolist()
        return list(map(table.__getitem__, self.second.tolist()))


class NodeIndex:
    """One pod shape under one node policy: every node's verdict, kept in the order a decision
    reads them, so a decision costs the nodes that changed since the last one, not a sweep.

    Fitting nodes are kept as `(sign x score, name)` keys, sorted (`fit_keys`: plain tuples, so
    finding a node's place compares them without a key function, and the score is `sign x`
    the first item again, exactly, as the sign is +-1), failed ones by name, the reason counts
    summed over the failed nodes; a changed node is taken out and put back with its new
    verdict. The 1e-9 rule of SPEC 7 only matters where two distinct scores are that close:
    how many neighbouring keys are (`near_pairs`) is kept in step with each insertion and
    removal (a look at the two neighbours, no search), and while there are none the ranking is
    the keys' order; else the groups `order_nodes` forms are formed again over the part of the
    keys the ranking reads, each re-sorted by name.
    """

    __slots__ = (
        "sign",
        "base",
        "position",
        "node_count",
        "held",
        "fit_values",
        "fit_names",
        "_fit_packed",
        "fit_entries",
        "_fail_names",
        "fail_entries",
        "reasons",
        "carriers",
        "messages",
        "near_pairs",
        "_ranking",
    )

    def __init__(self, sign: float):
        self.sign = sign
        self.base: Swept | None = None  # the sweep it was built from: verdicts not in `held`
        self.position = -1  # TOUCHES position read up to; -1: never built
        self.node_count = -1
        self.held: dict[str, NodeVerdict] = {}
        #: the fitting nodes' keys `(sign x score, name)`, sorted, as two lists side by side: a
        #: node's place is found among the values (packed doubles: a search reads one block of
        #: memory, not an object per step), and among the names only where values tie; None
        #: while `_fit_packed` holds them
        self.fit_values: array | None = array("d")
        self.fit_names: list[str] | None = []
        self._fit_packed: _Packed | None = None
        #: `(name, score)` beside each key, made on the first whole ranking asked (not kept to
        #: `top`) and kept in step from then on: a whole ranking is then a copy, not a rewrite
        self.fit_entries: list[tuple[str, float]] | None = None
        self._fail_names: list[str] | None = []
        self.fail_entries: list[tuple[str, NodeFailure]] = []
        self.reasons: dict[str, int] = {}  # reason -> its count summed over the failed nodes
        self.carriers: dict[str, int] = {}  # reason -> how many failed nodes name it
        #: a node rule's words (`noderules.RuleFailure.messages`) -> how many failed nodes say them
        self.messages: dict[str, int] = {}
        #: neighbouring keys whose values differ, by less than 1e-9: while none, the ranking is
        #: the keys' order as they stand
        self.near_pairs = 0
        self._ranking: list[tuple[str, float]] | None = None

    @property
    def fit_count(self) -> int:
        """How many nodes fit."""
        packed = self._fit_packed
        return len(packed) if packed is not None else len(self.fit_values)  # type: ignore[arg-type]

    @property
    def fit_keys(self) -> list[tuple[float, str]]:
        """`(sign x score, name)` of the fitting nodes, sorted (a copy)."""
        packed = self._fit_packed
        if packed is not None:
            return packed.unpacked()
        return list(zip(self.fit_values, self.fit_names, strict=True))  # type: ignore[arg-type]

    def rebuild(self, verdicts: list[tuple[str, NodeVerdict]]) -> None:
        """Every node afresh, `verdicts` in node-name order."""
        sign = self.sign
        self.base = None
        self.held = dict(verdicts)
        fit = sorted((sign * v.score, name) for name, v in verdicts if v.failure is None)
        self._fit_packed = None
        self.fit_values = values = array("d", [value for value, _ in fit])
        self.fit_names = [name for _, name in fit]
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
        self.near_pairs = sum(1 for i in range(1, len(values)) if 0 < values[i] - values[i - 1] < TOLERANCE)
        self._ranking = None

    def rebuild_swept(self, swept: Swept) -> None:
        """Every node afresh from a sweep (nodes in name order), as array operations: the
        verdict objects are made only for the nodes that change later (`update`), and the
        sorted keys and failed entries stay arrays (`_Packed`) until then."""
        self.base = swept
        self.held = {}
        fits = swept.fits
        fit = np.flatnonzero(fits)
        values = self.sign * swept.score[fit]
        order = np.argsort(values, kind="stable")  # equal values stay by name
        fit, values = fit[order], values[order]
        names = swept.names
        # (value, name) as `rebuild` makes them: names by row
        self._fit_packed = _Packed(values, fit.astype(np.int32), names)
        self.fit_values = self.fit_names = None
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
        steps = np.diff(values)
        self.near_pairs = int(np.count_nonzero((steps > 0) & (steps < TOLERANCE)))
        self._ranking = None

    def _unpack(self) -> None:
        """The packed lists of `rebuild_swept` as the plain lists `update_all` changes in place
        (once per sweep, on the first update)."""
        packed = self._fit_packed
        if packed is not None:
            self.fit_values = array("d", packed.first.astype(np.float64).tobytes())
            self.fit_names = packed.seconds()
            self._fit_packed = None
            self.fail_entries = self.fail_entries.unpacked()  # type: ignore[attr-defined]
            self._fail_names = None

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
        """A node's verdict changed (or was re-evaluated): replace what the index holds for it."""
        self.update_all(((name, verdict),))

    def update_all(self, changed) -> None:
        """`update` for each `(name, verdict)` of `changed` in turn (names distinct). What a
        node held is read off the sweep's columns without making a verdict of it; a node that
        fails as before, for the same counts, changes nothing summed or ordered (most re-checks
        of a changed node end so: then only the verdict held is replaced)."""
        held = self.held
        base = self.base
        sign = self.sign
        moved = False
        values: array = array("d")
        names: list[str] = []
        for name, verdict in changed:
            old = held.get(name)
            if old is not None:
                if old is verdict:
                    continue
                was, score = old.failure, old.score
            else:
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
                continue
            if not moved:
                moved = True
                self._ranking = None
                self._unpack()
                values, names = self.fit_values, self.fit_names  # type: ignore[assignment]
            if was is not None:
                self._remove_failed(name, was)
            elif score is not None:
                if failure is None:
                    self._move_fitting(name, sign * score, verdict.score)
                    held[name] = verdict
                    continue
                self._remove_fitting(name, score)
            if failure is not None:
                self._add_failed(name, verdict, failure)
                continue
            # a fitting node: its key goes in by score
            held[name] = verdict
            value = sign * verdict.score
            i = self._place_for(value, name)
            values.insert(i, value)
            names.insert(i, name)
            if self.fit_entries is not None:
                self.fit_entries.insert(i, (name, verdict.score))
            self._count_near(values, i, value)

    def _add_failed(self, name: str, verdict: NodeVerdict, failure: NodeFailure) -> None:
        """Put a failed node in by name (`update_all` puts a fitting one in by score)."""
        self.held[name] = verdict
        names = self.fail_names
        i = bisect_left(names, name)
        names.insert(i, name)
        self.fail_entries.insert(i, (name, failure))
        reasons, carriers = self.reasons, self.carriers
        for reason, n in failure.reasons.items():
            reasons[reason] = reasons.get(reason, 0) + n
            carriers[reason] = carriers.get(reason, 0) + 1
        for message in getattr(failure, "messages", ()):
            self.messages[message] = self.messages.get(message, 0) + 1

    def _count_near(self, values: array, i: int, value: float) -> None:
        """`near_pairs` after `value` went in at `values[i]`: the pair of neighbours it parts,
        and the two it makes."""
        if i:
            before = values[i - 1]
            if i + 1 < len(values):
                after = values[i + 1]
                change = (0 < value - before < TOLERANCE) + (0 < after - value < TOLERANCE)
                change -= 0 < after - before < TOLERANCE
            else:
                change = 0 < value - before < TOLERANCE
        elif len(values) > 1:
            change = 0 < values[1] - value < TOLERANCE
        else:
            return
        if change:
            self.near_pairs += change

    def _remove_failed(self, name: str, failure: NodeFailure) -> None:
        """Take a failed node out (`update_all` puts its new verdict in `held`)."""
        names = self.fail_names
        i = bisect_left(names, name)
        del names[i]
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

    def _fitting_at(self, name: str, value: float) -> int:
        """Where a fitting node's key `(value, name)` is among the keys (unpacked)."""
        values, names = self.fit_values, self.fit_names
        assert values is not None and names is not None  # unpacked by `update_all`
        i = bisect_left(values, value)
        if names[i] != name:  # ties: by name among them
            i = bisect_left(names, name, i, bisect_right(values, value, i))
        return i

    def _place_for(self, value: float, name: str) -> int:
        """Where the key `(value, name)` goes among the fitting keys (unpacked)."""
        values, names = self.fit_values, self.fit_names
        assert values is not None and names is not None  # unpacked by `update_all`
        i = bisect_left(values, value)
        if i < len(values) and values[i] == value:  # ties: by name among them
            i = bisect_left(names, name, i, bisect_right(values, value, i))
        return i

    def _move_fitting(self, name: str, old: float, score: float) -> None:
        """A node that fits before and after: its key `(old, name)` becomes `(sign x score,
        name)`. Where the new key still sorts between its neighbours it is rewritten where it
        stands; else the keys between its old and new places shift by one, or, when those
        are more than about an eighth of the keys after both places, it is taken out and put
        back (two moves of those keys, in C, but ~9x cheaper a key than a shift).
        Why: most re-checks of a placement's node leave it where it was or move it a few
        places (in a 5,000-pod burst at 20,000 nodes, 24,495 of 30,656 stayed, and most of
        the rest moved under 1,000 places), and each taking out and putting back moved the
        ~20,000 keys after it twice."""
        values, names = self.fit_values, self.fit_names
        assert values is not None and names is not None  # unpacked by `update_all`
        entries = self.fit_entries
        value = self.sign * score
        j = self._fitting_at(name, old)
        last = len(values) - 1
        before = values[j - 1] if j else None
        after = values[j + 1] if j < last else None
        stays = (before is None or before < value or (before == value and names[j - 1] < name)) and (
            after is None or value < after or (after == value and name < names[j + 1])
        )
        if stays:
            # `near_pairs`: the pairs it makes with its neighbours, for those it made
            change = 0
            if before is not None:
                change += (0 < value - before < TOLERANCE) - (0 < old - before < TOLERANCE)
            if after is not None:
                change += (0 < after - value < TOLERANCE) - (0 < after - old < TOLERANCE)
            if change:
                self.near_pairs += change
            values[j] = value
            if entries is not None:
                entries[j] = (name, score)
            return
        parted = self._parting(values, j, old)
        # its place among the other keys: where it goes in the list with it, less one when
        # its old key sorts before the new (keys are distinct: the names are)
        i = self._place_for(value, name)
        if j < i:
            i -= 1
        if abs(i - j) << 3 < 2 * len(values) - i - j:
            if i < j:
                values[i + 1 : j + 1] = values[i:j]
                names[i + 1 : j + 1] = names[i:j]
                if entries is not None:
                    entries[i + 1 : j + 1] = entries[i:j]
            else:
                values[j:i] = values[j + 1 : i + 1]
                names[j:i] = names[j + 1 : i + 1]
                if entries is not None:
                    entries[j:i] = entries[j + 1 : i + 1]
            values[i] = value
            names[i] = name
            if entries is not None:
                entries[i] = (name, score)
        else:
            del values[j]
            del names[j]
            values.insert(i, value)
            names.insert(i, name)
            if entries is not None:
                del entries[j]
                entries.insert(i, (name, score))
        if parted:
            self.near_pairs += parted
        self._count_near(values, i, value)

    def _parting(self, values: array, i: int, value: float) -> int:
        """How `near_pairs` changes when the key of value `value` at `i` leaves: the two pairs
        of neighbours it parts, and the one it leaves."""
        if i:
            before = values[i - 1]
            if i + 1 < len(values):
                after = values[i + 1]
                change = (0 < after - before < TOLERANCE) - (0 < value - before < TOLERANCE)
                return change - (0 < after - value < TOLERANCE)
            return -(0 < value - before < TOLERANCE)
        return -(0 < values[1] - value < TOLERANCE) if len(values) > 1 else 0

    def _remove_fitting(self, name: str, score: float) -> None:
        """Take a fitting node out (`update_all` puts its new verdict in `held`)."""
        value = self.sign * score
        values, names = self.fit_values, self.fit_names
        assert values is not None and names is not None  # unpacked by `update_all`
        i = self._fitting_at(name, value)
        change = self._parting(values, i, value)
        if change:
            self.near_pairs += change
        del values[i]
        del names[i]
        if self.fit_entries is not None:
            del self.fit_entries[i]

    def _value(self, i: int) -> float:
        packed = self._fit_packed
        return float(packed.first[i]) if packed is not None else self.fit_values[i]  # type: ignore[index]

    def _entries(self, start: int, stop: int) -> list[tuple[str, float]]:
        """`(name, score)` of the fitting keys from `start` to `stop`, in key order."""
        entries = self.fit_entries
        if entries is not None:
            return entries[start:stop]
        sign = self.sign
        packed = self._fit_packed
        if packed is not None:
            return [(name, sign * value) for value, name in packed[start:stop]]
        values, names = self.fit_values, self.fit_names
        assert values is not None and names is not None
        return [
            (name, sign * value) for value, name in zip(values[start:stop], names[start:stop], strict=True)
        ]

    def ranking(self, top: int | None = None) -> list[tuple[str, float]]:
        """`(name, score)` of the fitting nodes in policy order, as `order_nodes` gives it; with
        `top`, its first `top` entries only. Those cost `top`, not the fitting nodes: the index
        already holds them sorted on `(sign x score, name)`, and only the groups of near scores
        that start before `top` are re-sorted by name."""
        if top is not None:
            top = max(0, top)
        if self._ranking is not None:
            return self._ranking if top is None else self._ranking[:top]
        count = self.fit_count
        end = count if top is None else min(top, count)
        if top is None and self.fit_entries is None:
            self.fit_entries = self._entries(0, count)
        out = self._entries(0, end)
        if self.near_pairs:
            self._name_groups(out, end)
        if top is None:
            self._ranking = out
        return out

    def _name_groups(self, kept: list[tuple[str, float]], end: int) -> None:
        """Re-sort by name, in `kept` (the first `end` entries in key order), the groups of
        near scores: as `order_nodes`, a group runs from its first key while the values stay
        less than 1e-9 above that key's, and the next starts where it stops. A group of ties
        only is in name order already: it is stepped over with one search."""
        count = self.fit_count
        value = self._value
        packed = self._fit_packed
        values = packed.first if packed is not None else self.fit_values
        start = 0
        while start < end:
            first = value(start)
            if packed is not None:
                ties = start + int(np.searchsorted(values[start:], first, side="right"))  # type: ignore[index]
            else:
                ties = bisect_right(values, first, start)  # type: ignore[arg-type]
            if ties < count and value(ties) - first < TOLERANCE:
                # past the near values: the first key at least 1e-9 above `first`
                stop = bisect_left(
                    range(count), True, ties, count, key=lambda i: value(i) - first >= TOLERANCE
                )
                cut = min(stop, end)
                kept[start:cut] = sorted(self._entries(start, stop))[: cut - start]
                start = stop
            else:
                start = ties
