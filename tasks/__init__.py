"""Prefect tasks: thin wrappers over the plain-Python core in `hetriever/`.

Retries are declared on the decorators and only fire for transient failures (I/O, git,
timeouts); a file whose content is bad is not retried, it is reported as skipped.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
