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


class UserError(HetrieverError):
    """A mistake in what was asked: a setting, a filter, a limit, a name, a flag. The CLI
    exits 2 for these, as for a usage error; every other HetrieverError is operational (a
    server down, a run that failed) and exits 1."""


class ConfigurationError(UserError):
    """A setting (or the site's own configuration) is invalid or inconsistent."""


class InvalidFilterError(UserError):
    """A metadata filter is malformed or uses an unsupported operator."""


class InvalidLimitError(UserError):
    """A result limit, language or grouping is out of range."""


class UnknownVersionError(InvalidFilterError):
    """A search or a diff names a version of a repository that is not indexed."""


# --- sources (discover) -------------------------------------------------------------


class SourceError(HetrieverError):
    """A documentation source (parent repo, submodule, file) cannot be used."""


class SourceSettingError(SourceError, UserError):
    """docs_root or content_dir names no usable source (a typo, a missing directory)."""


class InvalidRepositoryNameError(SourceError, UserError):
    """A repository name does not fit `^[a-z0-9-]+$`, 3..63 characters."""


class RepositoryNotFoundError(SourceError, UserError):
    """A named repository is not among the discovered ones."""


# --- knowledge store ------------------------------------------------------------------


class KnowledgeStoreError(HetrieverError):
    """Base of every operational knowledge-store error."""


class BackendConnectionError(KnowledgeStoreError):
    """The Chroma backend (a path or a URL) cannot be reached or opened."""

    def __init__(self, message: str, *, location: str, hint: str | None = None) -> None:
        self.location = location
        super().__init__(f"{message} [{location}]", hint=hint)


class UnusableDirectoryError(BackendConnectionError, UserError):
    """HETRIEVER_CHROMA_PATH names a file, or lies under one: a setting to fix, not an outage."""


class CollectionNotFoundError(KnowledgeStoreError):
    pass


class InvalidCollectionNameError(UserError):
    pass


class DocumentNotFoundError(KnowledgeStoreError):
    pass


class IndexingError(KnowledgeStoreError):
    pass


class SearchError(KnowledgeStoreError):
    pass


class EmbeddingError(KnowledgeStoreError):
    pass


class WriterLockedError(KnowledgeStoreError):
    """Another process holds the writer lock on the same data directory."""


class DerivedIndexError(KnowledgeStoreError):
    """A BM25 index file is missing, damaged or empty while Chroma holds the chunks: searches
    run dense-only and the next ingest rebuilds it from Chroma."""
