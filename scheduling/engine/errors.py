"""Errors the engine raises. Each names the field at fault, so callers can key responses by it."""

from __future__ import annotations

#: `PodInvalid.code` of a pod none of whose containers asks for a GPU (SPEC 2): placing it is
#: not this scheduler's job, so it is rejected for good instead of waiting for a fixed spec.
NO_GPU = "no-gpu"


class PodInvalid(ValueError):
    """A pod that can never be placed as written: a bad resource value or annotation.

    `field` is a dotted path such as ``annotations.hami.io/device-scoring-weights`` or
    ``containers[0].resources.limits.nvidia.com/gpucores``; `code` is a machine-readable
    kind where callers act on it (`NO_GPU`), else None.
    """

    def __init__(self, field: str, message: str, code: str | None = None):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code


class ScenarioError(ValueError):
    """A malformed scenario or inventory: `where` says which part of the input is at fault."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message
