"""BM25 beside Chroma (local Chroma has no sparse index): the analyzer, the SQLite
file, the in-memory index searches run on, and the phrase bonus.
"""
