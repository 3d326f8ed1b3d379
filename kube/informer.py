"""List, then watch from the list's resourceVersion, forever: a cache that survives API trouble.

- A watch that ends (server timeout, connection cut) resumes from the last resourceVersion
  seen, so nothing is missed and nothing is listed again.
- 410 Gone (history compacted) means events were lost: list again, and hand the full list
  to the handler, which reconciles (pods deleted in the gap are found that way).
- No answer, or an error status: wait with exponential back-off (with jitter, capped),
  then resume.
A handler error is logged per object and never stops the loop; the agent hands the whole
cache to the handler again now and then (`resync`), so a change it failed to apply
(database briefly down) is applied later.
"""

from __future__ import annotations

import logging
import random
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .api import ApiError, ApiUnavailable, Gone

log = logging.getLogger("hamiadmin.kube.informer")


class Backoff:
    """Exponential back-off with jitter: base, 2 x base, ... up to `cap` seconds."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None):
        self.base, self.cap, self.failures = base, cap, 0
        self.rng = rng or random.Random()

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * 2 ** min(self.failures, 30))
        self.failures += 1
        return delay * (0.5 + self.rng.random() / 2)

    def reset(self) -> None:
        self.failures = 0


class Handler:
    """What an informer calls. `synced` gets every object after a list or a resync."""

    def synced(self, objects: list[dict], listed: bool) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def changed(self, kind: str, obj: dict) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class Handlers(Handler):
    """Several handlers of one informer, called in order."""

    def __init__(self, *handlers: Handler):
        self.handlers = handlers

    def synced(self, objects: list[dict], listed: bool) -> None:
        for handler in self.handlers:
            handler.synced(objects, listed)

    def changed(self, kind: str, obj: dict) -> None:
        for handler in self.handlers:
            handler.changed(kind, obj)


def cache_key(obj: dict) -> tuple[str, str]:
    """(namespace, name) as the cache keys any object; "" for cluster-scoped kinds. The
    namespace is interned: a cache of every pod holds each namespace's name once."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return sys.intern(namespace) if type(namespace) is str else namespace, meta.get("name") or ""


class Informer:
    """One resource kind. `cache` maps (namespace, name) to the latest object, or with
    `project` to what it returns for the object (a slim view; None: not kept at all). The
    handler always gets the objects as the API server sent them, except after a list or a
    resync, which hand it the cache."""

    def __init__(
        self,
        name: str,
        list_call: Callable[[], tuple[list[dict], str]],
        watch_call: Callable[[str, int], Iterable[tuple[str, dict]]],
        handler: Handler,
        watch_timeout: int = 60,
        backoff: Backoff | None = None,
        project: Callable[[dict], object | None] | None = None,
    ):
        self.name = name
        self.project = project
        self.list_call, self.watch_call, self.handler = list_call, watch_call, handler
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self.lock = threading.Lock()
        self.cache: dict[tuple[str, str], Any] = {}  # objects, or what `project` made of them
        self.resource_version = ""
        self.has_synced = threading.Event()
        self.lists = 0  # how many times the full list was read (tests and logs)
        self._stream: Any = None  # the open watch: the client's stream, which it can close

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.cache.values())

    def get(self, namespace: str, name: str) -> dict | None:
        with self.lock:
            return self.cache.get((namespace, name))

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                if not self.resource_version:
                    self._list()
                self._watch(stop)
                self.backoff.reset()
            except Gone as exc:
                log.info("%s: watch history expired (%s); listing again", self.name, exc)
                self.resource_version = ""
            except (ApiUnavailable, ApiError) as exc:
                if stop.is_set():  # interrupted on purpose
                    return
                delay = self.backoff.next_delay()
                log.warning("%s: %s; retrying in %.1fs", self.name, exc, delay)
                stop.wait(delay)

    def _list(self) -> None:
        objects, version = self.list_call()
        if self.project is not None:
            kept = ((cache_key(obj), self.project(obj)) for obj in objects)
            cache = {key: view for key, view in kept if view is not None}
        else:
            cache = {cache_key(obj): obj for obj in objects}
        del objects  # a list of every pod is large: only the cache stays
        with self.lock:
            self.cache = cache
        self.resource_version = version
        self.lists += 1
        self.resync(listed=True)
        self.has_synced.set()

    def resync(self, listed: bool = False) -> None:
        """Hand the whole cache to the handler (after a list, or to retry and heartbeat)."""
        try:
            self.handler.synced(self.snapshot(), listed)
        except Exception:  # noqa: BLE001 - the next resync tries again
            log.exception("%s: handling the full list failed", self.name)

    def interrupt(self) -> None:
        """Cut the open watch (from another thread) so `run` notices its stop event now."""
        stream = self._stream
        if stream is not None and hasattr(stream, "close"):
            stream.close()

    def _watch(self, stop: threading.Event) -> None:
        self._stream = self.watch_call(self.resource_version, self.watch_timeout)
        if stop.is_set():
            self._stream.close()
            return
        for kind, obj in self._stream:
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if kind == "BOOKMARK":
                self.resource_version = version or self.resource_version
                continue
            view = obj if self.project is None or kind == "DELETED" else self.project(obj)
            with self.lock:
                if view is None or kind == "DELETED":
                    self.cache.pop(cache_key(obj), None)
                else:
                    self.cache[cache_key(obj)] = view
            if version:
                self.resource_version = version
            try:
                self.handler.changed(kind, obj)
            except Exception:  # noqa: BLE001 - one bad object must not stop the watch
                log.exception("%s: handling %s %s failed", self.name, kind, "/".join(cache_key(obj)))
            self.backoff.reset()
            if stop.is_set():
                return
