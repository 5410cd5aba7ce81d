"""alphagym: teach a language model to write formulaic alphas, and prove on a holdout year that it did.

Importing it changes nothing in the host process; `alphagym.configure_runtime()` applies the thread and
allocator settings an alphagym process runs with (the CLI and the stage runner call it)."""

__version__ = "0.1.0"


def configure_runtime() -> None:
    """See `alphagym.runtime`."""
    from alphagym.runtime import configure_runtime as configure

    configure()
