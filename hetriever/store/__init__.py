"""The store: Chroma (vectors and metadata, the source of truth), the persistent BM25
index beside it (bm25/), the SQLite catalog, writes, repair and the search state
followers copy.
"""
