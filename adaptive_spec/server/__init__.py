"""The OpenAI-compatible HTTP server (``adaptive-spec serve``): ``create_app`` builds the FastAPI
app around a decoder, ``run.run`` serves it under uvicorn with a draining shutdown.

Lazy, so that mounting the ``serve`` command does not import FastAPI for every other command."""

__all__ = ["Settings", "create_app"]


def __getattr__(name: str):
    if name in __all__:
        from adaptive_spec.server import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
