"""Names and hashes every layer agrees on: a repository's collection name and a chunk's
integrity hash. Kept apart from the store so search and the CLI can check them without
importing the store (which imports search for its `search()` method)."""

from __future__ import annotations

import hashlib
import re

from chromadb.api.segment import check_index_name

from hetriever.errors import InvalidCollectionNameError

COLLECTION_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{1,61})[a-z0-9]$")


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
                 "letter or digit (the repository's name)")
    return name
