"""The metadata every chunk of a page carries (the chunker's chunks and the page record)."""

from __future__ import annotations

from collections.abc import Mapping

from hetriever.core.logs import get_logger
from hetriever.core.models import REQUIRED_CHUNK_METADATA, Metadata
from hetriever.parse.parsed_page import Page

log = get_logger("hetriever.chunk.chunker")


def page_metadata(page: Page, extra: Mapping | None) -> Metadata:
    """The metadata every chunk of `page` carries: `extra` (reserved keys refused), then the
    page's own fields."""
    # No run timestamp here: it would make every unchanged chunk differ on every run (and be
    # rewritten); run and file times live in the catalog.
    meta: Metadata = {}
    for key, value in (extra or {}).items():
        if key in REQUIRED_CHUNK_METADATA:
            log.warning("extra_metadata_ignored", key=key, reason="reserved chunk metadata key")
            continue
        if value is None or (isinstance(value, (list, tuple)) and not value):
            continue  # Chroma rejects None and empty lists
        meta[str(key)] = list(value) if isinstance(value, tuple) else value
    if page.tags:
        meta["tags"] = list(page.tags)
    description = page.front_matter.get("description")
    if isinstance(description, str) and description.strip():
        meta["description"] = description.strip()
    weight = page.front_matter.get("weight")
    if isinstance(weight, (int, float)) and not isinstance(weight, bool):
        meta["weight"] = weight
    meta.update(
        {
            "repository": page.repository,
            "file_path": page.file_path,
            "url": page.url,
            "title": page.title,
            "section": page.section,
        }
    )
    if page.lang:
        meta["lang"] = page.lang
        meta["translation_key"] = page.translation_key
    return meta
