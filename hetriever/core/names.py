"""Names and hashes every layer agrees on: a repository's name (from its directory's) and
collection name, and a chunk's integrity hash. Kept apart from the store so search and the
CLI can check them without importing the store (which imports search for its `search()`
method)."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from hetriever.core.chroma_import import override_checks_skipped
from hetriever.core.errors import InvalidCollectionNameError, RepositoryNotFoundError

with override_checks_skipped():
    from chromadb.api.segment import check_index_name

COLLECTION_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{1,61})[a-z0-9]$")
NAME_RE = re.compile(r"^[a-z0-9-]+$")  # a repository's name (discovery's rule)
NAME_MIN, NAME_MAX = 3, 63


def content_hash(text: str) -> str:
    """The integrity hash stored with every chunk (sha256 hex of its text)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def validate_collection_name(name: str) -> str:
    """Our rule (a repository name) and Chroma's; InvalidCollectionNameError otherwise."""
    ok = isinstance(name, str) and bool(COLLECTION_NAME_RE.match(name))
    if ok:
        try:
            check_index_name(name)
        except ValueError:
            ok = False
    if not ok:
        raise InvalidCollectionNameError(
            f"invalid collection name {name!r}",
            hint="use 3..63 lower-case letters, digits and hyphens, starting and ending with a "
            "letter or digit (the repository's name)",
        )
    return name


def is_valid_repository_name(name: str) -> bool:
    """Whether `name` can name an index: `^[a-z0-9-]+$`, 3..63 characters (discovery keeps a
    badly named repository among several, with its problem, so it fails alone)."""
    return NAME_MIN <= len(name) <= NAME_MAX and bool(NAME_RE.match(name))


def repository_name(directory: str) -> str:
    """The name a repository is indexed and named under, from its directory's name: that name
    when it is valid, else lower-cased, accents dropped, each run of other characters one dash,
    none at either end. `git submodule add <url>` names the directory after the remote, so
    `hugoDocs` is indexed as `hugodocs` and `opentelemetry.io` as `opentelemetry-io`; a valid
    name never changes (its index keeps its name), and one that cannot be made valid (too
    short, no letters or digits) is returned as it is, for the name checks to refuse."""
    if is_valid_repository_name(directory):
        return directory
    plain = unicodedata.normalize("NFKD", directory).encode("ascii", "ignore").decode()
    name = re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")
    return name if is_valid_repository_name(name) else directory


def as_given(names: list[str] | None) -> list[str] | None:
    """Repository names as people give them (`-r`, a search's `repository`): a submodule
    directory's name (`opentelemetry.io`) stands for the repository indexed from it; anything
    else is left as it is, for the name checks to judge."""
    if not names:
        return names
    return [repository_name(n) if isinstance(n, str) else n for n in names]


def require_known(names: list[str] | None, known: list[str]) -> None:
    """An unknown repository name is a clear error that lists the known ones."""
    unknown = sorted(set(names or []) - set(known))
    if unknown:
        raise RepositoryNotFoundError(
            f"unknown repositories: {', '.join(unknown)}",
            hint=f"known: {', '.join(sorted(known)) or 'none (run `hetriever ingest` first)'}",
        )
