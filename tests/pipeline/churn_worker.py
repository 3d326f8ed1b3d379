"""Ordinary writes while cycles run, in their own process, for the concurrency test.

Until its deadline it releases placed pods, submits new ones, replaces incarnations (a new
uid releases the old one's cards), has agents report nodes (capacity changes wake the
queue), and cordons and gives back cards: every write path that takes pod, node or card
locks while worker processes commit cycles. Prints a JSON summary: how many of each it
did, the failures (there must be none), and the database retries it needed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
import traceback


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=30)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--cards", type=int, default=4)
    args = parser.parse_args()

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
    django.setup()
    from scheduling import dbretry, services
    from scheduling.models import Card, Pod

    rng = random.Random(args.seed)
    done = {"release": 0, "submit": 0, "replace": 0, "report": 0, "cordon": 0}
    failures: list[str] = []
    serial = 0
    stop_at = time.monotonic() + args.deadline
    while time.monotonic() < stop_at:
        action = rng.choice(["release", "release", "submit", "replace", "report", "cordon"])
        try:
            if action in ("release", "replace"):
                placed = list(
                    Pod.objects.filter(status=Pod.SCHEDULED).values_list(
                        "pk", "namespace", "name", "containers"
                    )[:50]
                )
                if not placed:
                    time.sleep(0.02)
                    continue
                pk, namespace, name, containers = rng.choice(placed)
                if action == "release":
                    services.release_pod(pk, Pod.SUCCEEDED)
                else:
                    serial += 1
                    services.submit_pod(namespace, name, {}, containers, uid=f"churn-{args.seed}-{serial}")
            elif action == "submit":
                serial += 1
                services.submit_pod(
                    "churn",
                    f"c{args.seed}-{serial}",
                    {},
                    [
                        {
                            "name": "main",
                            "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000}},
                        }
                    ],
                )
            elif action == "report":
                n = rng.randrange(args.nodes)
                devices = [
                    {
                        "uuid": f"GPU-{n}-{i}",
                        "index": i,
                        "memory": 16000,
                        "numa": i // 2,
                        "type": "NVIDIA-Tesla T4",
                    }
                    for i in range(args.cards)
                ]
                services.report_inventory(f"node{n:02d}", {}, {"churn": str(rng.random())}, devices)
            else:
                uuid = rng.choice(list(Card.objects.values_list("uuid", flat=True)))
                services.cordon_card(uuid, True)
                services.cordon_card(uuid, False)
            done[action] += 1
        except Exception:  # noqa: BLE001 - every failure is reported, none may happen
            failures.append(f"{action}: {traceback.format_exc(limit=3)}")
    for pk in Card.objects.filter(cordoned=True).values_list("uuid", flat=True):
        services.cordon_card(pk, False)
    print(
        json.dumps(
            {
                "done": done,
                "failures": failures[:5],
                "failed": len(failures),
                "retries": dict(dbretry.RETRIES),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
