"""Hybrid search: dense and BM25 retrieval, fusion over pages, the exact-match path,
query language, results and the async KnowledgeStore that serves them; query
metrics.
"""
