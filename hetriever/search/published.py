"""Where a page is published: its language, its full link, and which of the pages at one path
a link names.

A page's `url` is site-relative; the baseURLs its site's last ingest recorded
(`hetriever.discover.site.Site.absolute_base_urls`: one per language in a multihost site) or the
`site_urls` setting give its scheme and host. A multihost site publishes every language's page
at the same path, each under its own host, so a pasted link's host tells them apart. Shared by
the search's exact-match path (`hetriever.search`) and the served page look-up
(`hetriever.serve.service`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from hetriever.core.versions import version_from_settings

DEFAULT_LANGUAGE = "en"  # Hugo's default content language
_LANGUAGE = re.compile(r"^[a-z]{2,3}(-[a-z0-9]{2,8})?$")


def language(metadata: Mapping[str, Any], content_dir: str = "content") -> str:
    """A page's language: its `lang` front matter, else a language directory under the content
    dir (`content/fr/...`), else Hugo's default."""
    declared = metadata.get("lang") or metadata.get("language")
    if isinstance(declared, str) and declared.strip():
        return declared.strip().lower()
    parts = str(metadata.get("file_path", "")).split("/")
    if content_dir in parts:
        parts = parts[parts.index(content_dir) + 1 :]
    if len(parts) > 1 and _LANGUAGE.match(parts[0].lower()):
        return parts[0].lower()
    return DEFAULT_LANGUAGE


def _openable(url: str) -> bool:
    """A site-relative path, or an absolute http(s) address: what a result may link to."""
    if url.startswith("/") and not url.startswith("//"):
        return True
    scheme = urlsplit(url.strip()).scheme.lower()
    return scheme in ("http", "https")


def full_link(url: str, lang: str, base_urls: Mapping[str, str]) -> str:
    """A page's address to open: its site-relative `url` (which holds the baseURL's path, as
    Hugo's relative permalink does) on the scheme and host of the baseURL its language is
    published under (`hetriever.discover.site.Site.absolute_base_urls`, recorded at ingest); the `url`
    itself when no such baseURL is known. An address that is neither site-relative nor
    http(s) (a front matter `url: javascript:...`) is no link: "" (callers show no link)."""
    if not _openable(url):
        return ""
    base = base_urls.get(lang) or base_urls.get("")
    if not base or not url.startswith("/") or url.startswith("//"):
        return url
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}{url}"


def recorded_base_urls(
    catalog: Any, repository: str, site_urls: Mapping[str, str]
) -> dict[str, str]:
    """Where a repository's site is published, as its last ingest recorded it (an index
    built before that was recorded has none: its results keep site-relative URLs), the
    site-wide one replaced by the repository's entry in `site_urls` (the setting). A version
    without an entry of its own is published where its repository is; one published at its
    own address has its own entry (`hugo-docs--v0-139-0`)."""
    record = catalog.repository(repository)
    recorded = record.settings.get("base_urls") if record else None
    found = {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}
    published = site_urls.get(repository, "")
    version = version_from_settings(record.settings) if record else None
    if not published and version is not None:
        published = site_urls.get(version.base, "")
    return {**found, "": published} if published else found


def base_urls_of(
    catalog: Any, matches: Iterable[Any], site_urls: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """`recorded_base_urls` of each repository the matches (search results) come from, read
    once each."""
    names = {str(m.metadata.get("repository", "")) for m in matches}
    return {name: recorded_base_urls(catalog, name, site_urls) for name in names}


def preference(
    metadata: Mapping[str, Any],
    host: str,
    base_urls: Mapping[str, str],
    languages: tuple[str, ...],
    content_dir: str = "content",
) -> int:
    """Which of the pages at one path (a multihost site's languages, two sites) a link at
    `host` ("" for a bare path) names, lowest first: 0, the page is published at `host`;
    1, it is in its site's default language (the first of `languages`); 2, neither."""
    lang = language(metadata, content_dir)
    link = full_link(str(metadata.get("url", "")), lang, base_urls)
    if host and urlsplit(link).netloc.lower() == host:
        return 0
    return 1 if languages and lang == languages[0] else 2


def links_of(
    catalog: Any, matches: Iterable[Any], site_urls: Mapping[str, str], content_dir: str = "content"
) -> list[str]:
    """Each match's full link (`full_link`) where its site's published address is known,
    else its site-relative URL: what the HTTP API, the CLI and the query flow show."""
    matches = list(matches)
    sites = base_urls_of(catalog, matches, site_urls)
    return [
        full_link(
            str(m.metadata.get("url", "")),
            language(m.metadata, content_dir),
            sites[str(m.metadata.get("repository", ""))],
        )
        for m in matches
    ]
