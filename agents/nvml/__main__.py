"""Command line of the NVML node agent.

    python -m agents.nvml --api URL --token-file PATH [--node NAME] [--config FILE]
    python -m agents.nvml --once                       # print this node's report, send nothing
    python -m agents.nvml --simulate FILE [--once]     # a node described in a file, no NVML

Logs go to stderr: JSON lines with LOG_FORMAT=json (the default when
HAMIADMIN_ENV=production), readable lines otherwise (hamiadmin.logging).

Exit codes: 0 done (``--once``, or stopped by SIGTERM/SIGINT), 2 bad flags,
configuration or node file, 3 NVML unavailable or unable to list the cards.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

from agents.nvml.config import ConfigError, load_config, with_flags
from agents.nvml.inventory import InventoryError, NvmlInventory, NvmlUnavailable
from agents.nvml.report import build_report, unmatched_exclusions
from agents.nvml.reporter import ApiReporter, TokenError, report_forever, token_source
from agents.nvml.simulation import load_node_file, measured
from hamiadmin.logging import configure

PROGRAM = "hamiadmin-agent"
EXIT_USAGE = 2
EXIT_NO_NVML = 3
TOKEN_ENV = "HAMIADMIN_AGENT_TOKEN"

log = logging.getLogger("hamiadmin.agent")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agents.nvml",
        description="Report this node's NVIDIA cards to the hamiadmin API.",
    )
    where = parser.add_argument_group("where to report")
    where.add_argument("--api", help="hamiadmin base URL, e.g. http://hamiadmin:8000")
    tokens = where.add_mutually_exclusive_group()
    tokens.add_argument("--token", help=f"API token (prefer --token-file or ${TOKEN_ENV})")
    tokens.add_argument("--token-file", help="file holding the API token, re-read on every report")
    where.add_argument("--node", help="node name (default: $NODE_NAME, else the host name)")
    where.add_argument("--interval", type=float, default=15.0, help="seconds between reports (default 15)")
    cards = parser.add_argument_group("how the cards are offered (flags override --config)")
    cards.add_argument("--config", help="YAML/JSON node configuration file")
    cards.add_argument("--split-count", help="vGPU slots per card (default 10)")
    cards.add_argument("--memory-scaling", help="reported memory = floor(total MiB x this) (default 1.0)")
    cards.add_argument("--core-scaling", help="reported cores = floor(100 x this) (default 1.0)")
    cards.add_argument(
        "--exclude",
        action="append",
        metavar="UUID|INDEX",
        help="hide a card (repeat, or separate with commas)",
    )
    modes = parser.add_argument_group("modes")
    modes.add_argument("--once", action="store_true", help="print the report JSON to stdout and exit")
    modes.add_argument("--simulate", metavar="FILE", help="report the node described in FILE instead of NVML")
    modes.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def load_library():
    """The real NVML binding, imported late so a missing package is reported like a missing driver."""
    try:
        import pynvml
    except ImportError as error:
        raise NvmlUnavailable(f"cannot import pynvml: {error}") from error
    return pynvml


def main(argv: list[str] | None = None, *, library=None, sysfs_root: str = "/sys") -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level, propagate, handlers = log.level, log.propagate, log.handlers[:]
    log.propagate = False
    handler = configure(args.log_level, logger=log, plain=f"{PROGRAM}: %(levelname)s: %(message)s")
    try:
        return run(parser, args, library, sysfs_root)
    finally:
        log.removeHandler(handler)
        for old in handlers:
            log.addHandler(old)
        log.setLevel(level)
        log.propagate = propagate


def fail(message: str, code: int) -> int:
    print(f"{PROGRAM}: {message}", file=sys.stderr)
    return code


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, library, sysfs_root: str) -> int:
    shaping = [args.config, args.split_count, args.memory_scaling, args.core_scaling, args.exclude]
    if args.simulate and any(value is not None for value in shaping):
        parser.error(
            "--simulate reports the file as written; --config, --split-count, --memory-scaling, "
            "--core-scaling and --exclude do not apply"
        )
    if not args.interval > 0:
        parser.error("--interval: expected a number of seconds > 0")
    reporter = None
    if not args.once:
        if not args.api:
            parser.error("--api is required unless --once is given")
        try:
            reporter = ApiReporter(
                args.api, token_source(args.token or os.environ.get(TOKEN_ENV), args.token_file)
            )
        except (ValueError, TokenError) as error:
            parser.error(str(error))

    inventory = None
    try:
        if args.simulate:
            body = load_node_file(args.simulate, args.node)
            node = body["node"]

            def produce() -> dict:
                return measured(body, time.time())
        else:
            config = with_flags(
                load_config(args.config),
                split_count=args.split_count,
                memory_scaling=args.memory_scaling,
                core_scaling=args.core_scaling,
                exclude=args.exclude,
            )
            node = args.node or os.environ.get("NODE_NAME") or socket.gethostname()
            inventory = NvmlInventory(library or load_library(), sysfs_root)
            inventory.open()
            node = node.strip()
            produce = nvml_reports(inventory, node, config)
    except ConfigError as error:
        return fail(str(error), EXIT_USAGE)
    except NvmlUnavailable as error:
        return fail(f"NVML is not available (driver not loaded?): {error}", EXIT_NO_NVML)

    try:
        if args.once:
            try:
                body = produce()
            except InventoryError as error:
                return fail(str(error), EXIT_NO_NVML)
            json.dump(body, sys.stdout, indent=2)
            sys.stdout.write("\n")
            return 0
        stop = threading.Event()
        stop_on_signals(stop)
        log.info("reporting node %s to %s every %gs", node, reporter.url, args.interval)
        report_forever(produce, reporter, interval=args.interval, sleep=stop.wait, stopped=stop.is_set)
        log.info("stopped")
        return 0
    finally:
        if inventory is not None:
            inventory.close()


def nvml_reports(inventory: NvmlInventory, node: str, config) -> Callable[[], dict]:
    """A report producer that warns once about exclusions naming no card."""
    warned = False

    def produce() -> dict:
        nonlocal warned
        reading = inventory.read()
        if not warned:
            for selector in unmatched_exclusions(reading, config):
                log.warning("exclusion %r matches no card on this node", selector)
            warned = True
        return build_report(node, reading, config)

    return produce


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM (kubelet) and SIGINT (Ctrl-C) end the loop after the current report."""
    for number in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(number, lambda *_: stop.set())
        except ValueError:
            pass


if __name__ == "__main__":
    sys.exit(main())
