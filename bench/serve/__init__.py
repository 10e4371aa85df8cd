"""Served search: warm HTTP latency, the first query, load during an ingest, following a Chroma server."""
