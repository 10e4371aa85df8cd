"""The incremental algorithm: one run turns a change set into writes and deletes
(per-file step, windowed writes, commit recorded last), plus purge, forget and
migrate.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
