"""The incremental algorithm: one run turns a change set into writes and deletes
(per-file step, windowed writes, commit recorded last), plus purge, forget and
migrate.
"""
