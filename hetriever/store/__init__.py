"""The store: Chroma (vectors and metadata, the source of truth), the persistent BM25
index beside it (bm25/), the SQLite catalog (every table in catalog_schema), and one
`Store` (knowledge_store) composed of peers over one shared Chroma handle: views, reads,
writes, BM25 repair and the replica followers copy.
"""
