"""The embed stage: the offline MiniLM model (built at install time), the embedders,
and embedding on a Dask cluster.
"""
