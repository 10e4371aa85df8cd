"""Hybrid search: dense and BM25 retrieval, fusion over pages, the exact-match path,
query language and results, over the store's read side; query metrics.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
