"""The project's error types: every boundary (user input, files, graphs, engines) raises one."""


class CellspecError(Exception):
    """Base of every error cellspec raises on purpose."""


class InvalidArgument(CellspecError):
    """A caller passed a value the API refuses; nothing was changed."""


class InvalidArtifact(CellspecError):
    """An artifact (manifest, graph, weights) is missing, corrupt or inconsistent."""


class InvalidCheckpoint(CellspecError):
    """A checkpoint cannot be exported: unknown architecture, missing tensor, bad shape."""


class ExecutionFailed(CellspecError):
    """An engine call failed after the cache was changed; the sessions named are poisoned."""

    def __init__(self, message: str, poisoned: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.poisoned = poisoned
