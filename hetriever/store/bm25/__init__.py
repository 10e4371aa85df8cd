"""BM25 beside Chroma (local Chroma has no sparse index): the analyzer, the SQLite
file, the in-memory index searches run on, and the phrase bonus.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
