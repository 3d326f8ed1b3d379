"""Errors the engine raises. Each names the field at fault, so callers can key responses by it."""


class PodInvalid(ValueError):
    """A pod that can never be placed as written: a bad resource value or annotation.

    `field` is a dotted path such as ``annotations.hami.io/device-scoring-weights`` or
    ``containers[0].resources.limits.nvidia.com/gpucores``.
    """

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ScenarioError(ValueError):
    """A malformed scenario or inventory: `where` says which part of the input is at fault."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message
