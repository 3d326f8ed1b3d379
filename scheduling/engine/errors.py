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


#: How many problems one scenario keeps at most; past it they are only counted, so a file
#: of 100,000 broken pods does not make an answer as big as itself.
MAX_PROBLEMS = 100


class ScenarioProblems(ScenarioError):
    """Every problem found in one scenario, in file order (at most MAX_PROBLEMS kept, `total`
    counted), so a user fixes them all in one go. A ScenarioError naming the first, so callers
    that show one message keep working."""

    def __init__(self, problems: list[ScenarioError], total: int | None = None):
        first = problems[0]
        self.problems = problems
        self.total = max(total or 0, len(problems))
        more = self.total - 1
        super().__init__(first.where, first.message + (f" (and {more} more problems)" if more else ""))
        self.message = first.message


class Problems:
    """The problems of a scenario found so far: validation goes past the first one."""

    def __init__(self):
        self.found: list[ScenarioError] = []
        self.total = 0

    def __bool__(self) -> bool:
        return self.total > 0

    def add(self, problem: ScenarioError) -> None:
        if isinstance(problem, ScenarioProblems):
            for each in problem.problems:
                self.add(each)
            self.total += problem.total - len(problem.problems)
            return
        self.total += 1
        if len(self.found) < MAX_PROBLEMS:
            self.found.append(problem)

    def note(self, where: str, message: str) -> None:
        self.add(ScenarioError(where, message))

    def check(self, parse, *args, **kwargs):
        """`parse(*args, **kwargs)`, or None with the problems it raised recorded."""
        try:
            return parse(*args, **kwargs)
        except ScenarioError as exc:
            self.add(exc)
            return None

    def raise_any(self) -> None:
        if self.total:
            raise ScenarioProblems(self.found, self.total)
