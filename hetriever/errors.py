"""One hierarchy for every error hetriever raises on purpose.

Each message says what went wrong *and* what to do about it, so the CLI can print
`str(error)` without a traceback for anything that is a user's or an operator's mistake.
"""

from __future__ import annotations


class HetrieverError(Exception):
    """Root of every error hetriever raises deliberately."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message} ({hint})" if hint else message)


# --- sources (discover) -------------------------------------------------------------


class SourceError(HetrieverError):
    """A documentation source (parent repo, submodule, file) cannot be used."""


class InvalidRepositoryNameError(SourceError):
    """A repository name does not fit `^[a-z0-9-]+$`, 3..63 characters."""


class RepositoryNotFoundError(SourceError):
    """A named repository is not among the discovered ones."""


# --- knowledge store ------------------------------------------------------------------


class KnowledgeStoreError(HetrieverError):
    """Base of every knowledge-store error."""


class ConfigurationError(KnowledgeStoreError):
    """Settings are missing, malformed or contradictory."""


class BackendConnectionError(KnowledgeStoreError):
    """The Chroma backend (a path or a URL) cannot be reached or opened."""

    def __init__(self, message: str, *, location: str, hint: str | None = None) -> None:
        self.location = location
        super().__init__(f"{message} [{location}]", hint=hint)


class CollectionNotFoundError(KnowledgeStoreError):
    pass


class InvalidCollectionNameError(KnowledgeStoreError):
    pass


class DocumentNotFoundError(KnowledgeStoreError):
    pass


class IndexingError(KnowledgeStoreError):
    pass


class SearchError(KnowledgeStoreError):
    pass


class EmbeddingError(KnowledgeStoreError):
    pass


class InvalidFilterError(KnowledgeStoreError):
    pass


class InvalidLimitError(KnowledgeStoreError):
    pass


class WriterLockedError(KnowledgeStoreError):
    """Another process holds the writer lock on the same data directory."""


class DerivedIndexError(KnowledgeStoreError):
    """A BM25 index file is missing, damaged or empty while Chroma holds the chunks: searches
    run dense-only and the next ingest rebuilds it from Chroma."""
