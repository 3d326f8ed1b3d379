"""The worked examples of docs/queues.md ("Fair share", "Worked examples") run as they are
written: each table is read from the doc, the queue book splits the capacity, and every
queue's fair share must be the one the doc states."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from scheduling.engine.batch.queues import Claim, QueueBook, QueueState, split_share

DOC = Path(__file__).resolve().parents[3] / "docs" / "queues.md"


def examples() -> list[tuple[str, int, list[dict[str, str]]]]:
    """(title, capacity in MiB, rows by column) of each example under "Worked examples"."""
    text = DOC.read_text()
    section = text.split("#### Worked examples", 1)[1].split("\n### ", 1)[0]
    found = []
    for block in re.split(r"\n##### ", section)[1:]:
        title = block.splitlines()[0].strip()
        capacity = int(re.search(r"Capacity: (\d+) MiB", block).group(1))
        lines = [line for line in block.splitlines() if line.startswith("|")]
        header = [cell.strip() for cell in lines[0].strip("|").split("|")]
        rows = [
            dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
            for line in lines[2:]
        ]
        found.append((title, capacity, rows))
    return found


def figure(cell: str) -> int | None:
    return int(cell) if cell else None


EXAMPLES = examples()


def test_the_doc_has_its_worked_examples():
    assert len(EXAMPLES) >= 9
    assert EXAMPLES[0][0] == "1. Quotas split the cluster"


@pytest.mark.parametrize(("title", "capacity", "rows"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_a_worked_example_of_the_doc(title, capacity, rows):
    states = [
        QueueState(
            row["queue"],
            parent=row["parent"] or None,
            weight=float(row["weight"] or 1),
            guarantee={"gpumem": figure(row["guarantee"])},
            quota={"gpumem": figure(row["quota"])} if row["quota"] else {},
            limit={"gpumem": figure(row["limit"])},
            lend_guarantee=row["lends"] == "yes",
        )
        for row in rows
    ]
    book = QueueBook(states, capacity={"vgpus": 0, "gpumem": capacity, "gpucores": 0})
    for row in rows:
        if row["uses"] and int(row["uses"]):
            book.add(row["queue"], {"gpumem": int(row["uses"])})
    fair = book.fair_shares({row["queue"] for row in rows if row["waiting"] == "yes"})
    got = {row["queue"]: round(fair[row["queue"]]["gpumem"]) for row in rows}
    assert got == {row["queue"]: int(row["fair share"]) for row in rows}, title
    roots = [row["queue"] for row in rows if not row["parent"]]
    assert sum(fair[name]["gpumem"] for name in roots) <= capacity + 1e-6


def test_the_split_never_passes_a_limit_or_the_total_and_fills_what_is_wanted():
    """Water-filling's invariants on random figures: nobody past min(wants, limit) (a kept
    guarantee aside), the total never exceeded, and nothing left over while a queue wants more."""
    rng = random.Random(28)
    for _ in range(2000):
        claims = []
        for i in range(rng.randint(1, 5)):
            guarantee = rng.choice((0, 0, 1000, 5000))
            quota = max(guarantee, rng.choice((0, 0, 4000, 20000)))
            limit = rng.choice((None, None, max(quota, 1) * rng.choice((1, 2))))
            wants = rng.choice((float("inf"), rng.choice((0, 2000, 30000))))
            claims.append(
                (f"q{i}", rng.choice((1, 2, 3)), guarantee, quota, limit, wants, rng.random() < 0.3)
            )
        total = rng.choice((10000, 40000, 100000))
        split = split_share(
            total,
            [
                Claim(n, weight=w, guarantee=g, quota=q, limit=lim, wants=want, lends=lend)
                for n, w, g, q, lim, want, lend in claims
            ],
        )
        assert sum(split.values()) <= total + 1e-6
        room = {}
        for n, _, g, _, lim, want, lend in claims:
            cap = min(want, lim if lim is not None else float("inf"))
            kept = g if not lend else 0
            room[n] = max(cap, min(kept, lim) if lim is not None else kept)
            assert split[n] <= room[n] + 1e-6, (claims, total, split)
        if any(split[n] < room[n] - 1e-6 for n in split):
            assert sum(split.values()) >= total - 1e-6, (claims, total, split)
