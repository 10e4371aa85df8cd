"""How fast a search answers in-process: BM25, the store, filters, facets, HNSW recall, access, the CLI."""
