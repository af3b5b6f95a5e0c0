"""Errors the engine raises on bad input. The CLI prints them on one line and exits non-zero."""


class AdaptiveSpecError(Exception):
    """Base class for errors meant for the user, not for a traceback."""


class InvalidParameterError(AdaptiveSpecError, ValueError):
    """A parameter has a value the engine cannot honour. The message names both."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        self.name = name
        self.value = value
        self.reason = reason
        super().__init__(f"invalid {name}={value!r}: {reason}")


class ModelLoadError(AdaptiveSpecError):
    """A model could not be found or loaded."""
