"""deployments package."""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
