"""The embed stage: the offline MiniLM model (built at install time), the embedders,
and embedding on a Dask cluster.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
