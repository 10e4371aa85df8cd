"""What every stage shares: the data models passed between stages, one error hierarchy,
settings, logging, names, locks, SQLite access, access levels, the clock, the process-wide
caches and fault injection.
Imports nothing else of hetriever.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
