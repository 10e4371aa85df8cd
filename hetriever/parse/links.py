"""Links between a site's pages: what each page links to, and how often a page is linked.

A page many other pages link to is a hub the authors send readers to ("Menus", "Pagination",
"Collector"); a one-method reference page is linked from few. People asking a question in
their own words are, more often than not, after such a hub, while the words of their question
match the narrow pages best. So page results of a long English query (a question, not a
look-up by name: `results.is_question`) add a small prior for the pages linked from more other
pages (`link_prior_weight`; measured in bench/README.md).

At index time each page's outbound links become keys (`outbound_keys`), stored in the metadata
of the chunk that stands for the page (`links_to`, where followers read them too) and kept per
file in the catalog, replaced whenever the file is processed, like its titles:
- `url:/a/b/`: a URL link (`[x](/a/b/)`, `[x](../b/)` resolved against the page's URL,
  `<a href=...>`, reference definitions);
- `path:content/en/a/b`: a link to a content file (`{{< ref "a/b.md" >}}`, `relref`,
  `[x](b.md)`), resolved to the repository path without extension, `/index` or `/_index`,
  relative to the page's folder and to its content root (Hugo tries both).
At search time a page's own keys (`page_keys`: its URL and its path) are looked up, and the
pages behind them counted once each (`LinkPrior`). Links to other sites are not counted.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

LINKS_KEY = "links_to"  # chunk metadata: the keys a page links to (on its display chunk)

# [text](target), ![alt](target), [label]: target, href="target", {{< ref "target" >}}
_LINKS = re.compile(
    r"\]\(\s*<?(?P<inline>[^)\s>]+)"
    r"|^[ ]{0,3}\[[^\]\n]+\]:[ \t]*<?(?P<definition>[^\s>]+)"
    r"|\bhref\s*=\s*[\"'](?P<href>[^\"']+)[\"']"
    r"|\{\{[<%]\s*(?:rel)?ref\s+\"(?P<ref>[^\"]+)\"",
    re.MULTILINE,
)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
_CONTENT_FILE = re.compile(r"\.(md|markdown|mdown)$", re.IGNORECASE)


def _path_key(path: str) -> str:
    stem = _CONTENT_FILE.sub("", posixpath.normpath(path).lower().strip("/"))
    for suffix in ("/index", "/_index"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return "path:" + stem


def _url_key(url: str) -> str:
    path = posixpath.normpath(url.lower())
    return "url:" + ("/" if path in (".", "/") else path.rstrip("/") + "/")


def outbound_keys(body: str, file_path: str, url: str, content_root: str) -> list[str]:
    """The keys of what a page's raw Markdown `body` links to (sorted, each once).

    `file_path` is the page's repository path, `url` its public URL path, `content_root` the
    repository folder its content-relative paths start from (e.g. "content/en")."""
    folder = posixpath.dirname(file_path)
    keys: set[str] = set()
    for match in _LINKS.finditer(body):
        kind = match.lastgroup or ""
        target = (match.group(kind) or "").split("#", 1)[0].split("?", 1)[0].strip()
        if not target or "{{" in target or _SCHEME.match(target) or target.startswith("//"):
            continue
        if kind == "ref" or _CONTENT_FILE.search(target):
            if target.startswith("/"):
                keys.add(_path_key(posixpath.join(content_root, target.lstrip("/"))))
            else:  # relative to the page's folder first, then to the content root
                keys.add(_path_key(posixpath.join(folder, target)))
                keys.add(_path_key(posixpath.join(content_root, target)))
        elif target.startswith("/"):
            keys.add(_url_key(target))
        elif url:
            keys.add(_url_key(posixpath.join(url if url.endswith("/") else url + "/", target)))
    return sorted(keys)


def links_of(metadata: Mapping[str, Any]) -> list[str]:
    """The link keys a page's display chunk carries."""
    value = metadata.get(LINKS_KEY)
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []


def shown(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """A chunk's metadata as search results show it: without the link keys (up to dozens per
    page, for ranking only)."""
    return {k: v for k, v in (metadata or {}).items() if k != LINKS_KEY}


def page_keys(metadata: Mapping[str, Any]) -> list[str]:
    """The keys other pages' links to this page (a chunk's `metadata`) are stored under."""
    keys = []
    if metadata.get("file_path"):
        keys.append(_path_key(str(metadata["file_path"])))
    if metadata.get("url"):
        keys.append(_url_key(str(metadata["url"])))
    return keys


class LinkSources(Protocol):
    def link_sources(self, collection: str, keys: Iterable[str]) -> dict[str, set[str]]: ...


class LinkPrior:
    """log(1 + the number of other pages linking to a page), looked up once per page and
    search. `physical` maps a search's repository names to their collections."""

    def __init__(self, catalog: LinkSources, physical: Mapping[str, str], weight: float) -> None:
        self.weight = weight
        self._catalog, self._physical = catalog, physical
        self._known: dict[str, float] = {}

    def values(self, pages: Mapping[str, tuple[str, Mapping[str, Any]]]) -> dict[str, float]:
        """{page: prior} for pages given as {page: (repository, a chunk's metadata)}."""
        missing: dict[str, dict[str, tuple[str, list[str]]]] = {}
        for page, (name, metadata) in pages.items():
            if page not in self._known:
                missing.setdefault(name, {})[page] = (
                    str(metadata.get("file_path", "")),
                    page_keys(metadata),
                )
        for name, wanted in missing.items():
            collection = self._physical.get(name)
            keys = {k for _, ks in wanted.values() for k in ks}
            sources = self._catalog.link_sources(collection, keys) if collection else {}
            for page, (path, page_keys_) in wanted.items():
                linking = set().union(*(sources.get(k, set()) for k in page_keys_)) - {path}
                self._known[page] = math.log1p(len(linking))
        return {page: self._known[page] for page in pages}
