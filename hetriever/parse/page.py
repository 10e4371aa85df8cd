"""Content file -> `Page`: front matter (YAML/TOML/JSON) made Chroma-valid, Hugo URL and section.

Parsing never raises on bad front matter: the body is kept, `Page.front_matter_error` says what
was wrong, and the page gets its title and URL from its path alone.
"""

from __future__ import annotations

import datetime as dt
import json
import posixpath
import re
from collections.abc import Collection, Mapping
from typing import Any

from bs4 import BeautifulSoup
from frontmatter.default_handlers import TOMLHandler, YAMLHandler

from hetriever.core.logs import get_logger
from hetriever.core.models import Metadata, MetadataValue
from hetriever.discover.publish_rules import page_facts
from hetriever.discover.site import Site
from hetriever.parse.parsed_page import Page

log = get_logger(__name__)

# Front matter keys that travel with a page (and may become chunk metadata).
PUBLIC_KEYS = (
    "title",
    "linkTitle",
    "description",
    "summary",
    "weight",
    "tags",
    "categories",
    "keywords",
    "aliases",
    "draft",
    "date",
    "slug",
    "url",
)
# Kept only so `skip_reason` can judge the page from the `Page` alone.
INTERNAL_KEYS = ("build_render", "redirect", "headless")

_STRING_KEYS = ("title", "linkTitle", "description", "summary", "slug", "url", "date")
_LIST_KEYS = ("tags", "categories", "keywords", "aliases")
_PAGE_EXTENSIONS = (".md", ".markdown", ".mdown", ".html", ".htm")

_YAML = YAMLHandler()
_TOML = TOMLHandler() if TOMLHandler is not None else None
_JSON_START = re.compile(r"\{\s*(?:\n|\"|\})")
_HTML_TAG = re.compile(r"<[A-Za-z/!]")
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_SPACES = re.compile(r"\s+")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)


# --- front matter -------------------------------------------------------------------


def split_front_matter(text: str) -> tuple[str, str, str, str]:
    """Split `text` into (format, raw front matter, body, error).

    format is "yaml", "toml", "json" or "" (none). When the block is not closed, error is set and
    the body is the whole text, so nothing is lost.
    """
    first, nl, _ = text.partition("\n")
    delim = first.rstrip()
    if delim in ("---", "+++"):
        fmt = "yaml" if delim == "---" else "toml"
        start = len(first) + len(nl)
        pos = start
        while pos <= len(text):
            end = text.find("\n", pos)
            line = text[pos:] if end < 0 else text[pos:end]
            if line.rstrip() == delim:
                body = "" if end < 0 else text[end + 1 :]
                return fmt, text[start:pos], body, ""
            if end < 0:
                break
            pos = end + 1
        return fmt, "", text, f"unclosed {fmt.upper()} front matter: no closing {delim} line"
    if _JSON_START.match(text):
        try:
            _, end = json.JSONDecoder().raw_decode(text)
        except ValueError as exc:
            return "json", "", text, f"invalid JSON front matter: {exc}"
        return "json", text[:end], text[end:].lstrip("\r\n"), ""
    return "", "", text, ""


def _load(fmt: str, raw: str) -> tuple[dict[str, Any], str]:
    """Decode one front matter block; (mapping, "") or ({}, error). Never raises."""
    try:
        if fmt == "yaml":
            data = _YAML.load(raw)
        elif fmt == "toml":
            if _TOML is None:
                return {}, "TOML front matter needs the `toml` package"
            data = _TOML.load(raw)
        else:
            data = json.loads(raw)
    except Exception as exc:  # YAML, TOML and JSON libraries raise assorted types
        msg = " ".join(str(exc).split())
        return {}, f"invalid {fmt.upper()} front matter: {msg[:300]}"
    if data is None:
        return {}, ""  # e.g. front matter holding only a comment
    if not isinstance(data, dict):
        return {}, f"{fmt.upper()} front matter is a {type(data).__name__}, not a mapping"
    return data, ""


# --- value coercion -----------------------------------------------------------------


def _scalar_str(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (str, int, float)):
        return str(value).strip()
    return None  # nested junk (mappings, lists, None)


def _plain_text(value: str) -> str:
    """Drop HTML and Markdown link markup from a one-line metadata value."""
    if _HTML_TAG.search(value):
        value = _HTML_COMMENT.sub(" ", value)
        value = BeautifulSoup(value, "html.parser").get_text(" ")
    if "](" in value:
        value = _MD_LINK.sub(r"\1", value)
    return _SPACES.sub(" ", value).strip()


def _as_list(value: Any) -> list[str]:
    items = value if isinstance(value, (list, tuple, set)) else [value]
    out = []
    for item in items:
        text = _scalar_str(item)
        if text:
            out.append(text)
    return out


def _as_number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value.strip())
            except ValueError:
                pass
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "yes", "on", "1"):
            return True
        if word in ("false", "no", "off", "0", ""):
            return False
    return None


def page_params(data: Mapping[str, Any]) -> dict[str, str]:
    """Scalars of raw front matter by dotted lower-case key, as Hugo's `param` looks them up.

    Hugo lower-cases parameter names and reads `params.x` and a top-level `x` alike.
    """
    out: dict[str, str] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(inner, f"{prefix}{str(key).lower()}.")
            return
        text = _scalar_str(value)
        if text is not None and prefix:
            out.setdefault(prefix[:-1], text)

    walk(data, "")
    params = data.get("params")
    if isinstance(params, Mapping):
        for key, value in page_params(params).items():
            out.setdefault(key, value)
    return out


def cascade_params(data: Mapping[str, Any]) -> dict[str, str]:
    """The `param` values a page's `cascade` passes to its descendants: a map, or a list of
    maps; an entry with a `target` (or `_target`) page matcher is left out, since which pages
    it reaches is decided by matching we do not do."""
    cascade = data.get("cascade")
    entries = cascade if isinstance(cascade, list) else [cascade]
    out: dict[str, str] = {}
    for entry in entries:
        if isinstance(entry, Mapping) and not ({"target", "_target"} & set(entry)):
            for key, value in page_params(entry).items():
                out.setdefault(key, value)
    return out


def normalise_front_matter(data: Mapping[str, Any]) -> Metadata:
    """The kept keys of `data`, each a valid Chroma metadata value; anything else is dropped."""
    out: Metadata = {}
    for key in _STRING_KEYS:
        if key in data:
            text = _scalar_str(data[key])
            if text and key in ("description", "summary"):
                text = _plain_text(text)
            if text:
                out[key] = text
    for key in _LIST_KEYS:
        if key in data:
            items = _as_list(data[key])
            if items:
                out[key] = items
    if "weight" in data:
        number = _as_number(data["weight"])
        if number is not None:
            out["weight"] = number
    for key in ("draft", "headless"):
        if key in data:
            flag = _as_bool(data[key])
            if flag is not None:
                out[key] = flag
    build = data.get("build")
    if isinstance(build, Mapping):
        render = _scalar_str(build.get("render"))
        if render:
            out["build_render"] = render.lower()
    redirect = _scalar_str(data.get("redirect"))
    if redirect:
        out["redirect"] = redirect
    return out


# --- paths and URLs -----------------------------------------------------------------


def _content_parts(file_path: str, content_dir: str, language_dirs: Collection[str]) -> list[str]:
    """Path segments below the content dir, with a leading language dir dropped."""
    path = file_path.replace("\\", "/").lstrip("/")
    prefix = content_dir.strip("/")
    if prefix and (path == prefix or path.startswith(prefix + "/")):
        path = path[len(prefix) :].lstrip("/")
    parts = [p for p in path.split("/") if p and p != "."]
    if len(parts) > 1 and parts[0] in language_dirs:
        parts = parts[1:]
    return parts


def _stem(name: str) -> str:
    root, ext = posixpath.splitext(name)
    return root if ext.lower() in _PAGE_EXTENSIONS else name


def _urlize(segment: str) -> str:
    return "-".join(segment.strip().lower().split())


def page_url(
    file_path: str,
    front_matter: Mapping[str, Any],
    *,
    content_dir: str = "content",
    language_dirs: Collection[str] = ("en",),
) -> str:
    """The URL path Hugo publishes the page at, for the common cases (see module docs)."""
    explicit = front_matter.get("url")
    if isinstance(explicit, str) and explicit.strip():
        url = explicit.strip()
        return url if url.startswith("/") or "://" in url else "/" + url
    parts = _content_parts(file_path, content_dir, language_dirs)
    if not parts:
        return "/"
    stem = _stem(parts[-1])
    segments = parts[:-1]
    if stem not in ("_index", "index"):
        segments = segments + [stem]
    slug = front_matter.get("slug")
    if isinstance(slug, (str, int, float)) and str(slug).strip() and segments and stem != "_index":
        segments = segments[:-1] + [str(slug).strip()]
    segments = [s for s in (_urlize(s) for s in segments) if s]
    return "/" + "/".join(segments) + "/" if segments else "/"


def _kind(relative: str) -> str:
    """Hugo's page kind of a content file: home, section or page."""
    parts = [p for p in relative.split("/") if p]
    if parts and _stem(parts[-1]) == "_index":
        return "home" if len(parts) == 1 else "section"
    return "page"


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")
_TOKEN = re.compile(r":([a-z]+)")


def _permalink(
    site: Site, lang: str, relative: str, front_matter: Mapping[str, Any], title: str
) -> str | None:
    """The URL a `permalinks` pattern of the site gives the page (Hugo's map form and its
    common tokens), or None: no pattern for its kind and top-level section, or a token this
    does not know (the default URL is kept)."""
    parts = [p for p in relative.split("/") if p]
    if not parts:
        return None
    stem = _stem(parts[-1])
    kind = "section" if stem == "_index" else "page"
    section = parts[0] if len(parts) > 1 else ""
    pattern = site.permalink(lang, kind, section)
    if not pattern:
        return None
    directories = parts[:-1]
    base = directories[-1] if stem == "index" and directories else stem
    slug = front_matter.get("slug")
    slug = str(slug).strip() if isinstance(slug, (str, int, float)) and str(slug).strip() else ""
    date = _DATE.match(str(front_matter.get("date") or ""))
    values = {
        "section": section,
        "sections": "/".join(directories),
        "title": _urlize(title),
        "slug": _urlize(slug or title),
        "filename": base,
        "contentbasename": base,
        "slugorfilename": slug or base,
        "slugorcontentbasename": slug or base,
    }
    if date:
        values.update(
            year=date.group(1),
            month=date.group(2),
            day=date.group(3),
            monthname=_MONTHS[int(date.group(2)) - 1].lower(),
        )
    unknown = [t for t in _TOKEN.findall(pattern) if t not in values]
    if unknown:
        return None
    url = _TOKEN.sub(lambda m: values[m.group(1)], pattern)
    url = re.sub(r"/{2,}", "/", "/" + url.strip("/") + "/")
    return url


def page_section(
    file_path: str, *, content_dir: str = "content", language_dirs: Collection[str] = ("en",)
) -> str:
    """First directory under the content dir; "" for the home page and root-level pages."""
    parts = _content_parts(file_path, content_dir, language_dirs)
    return parts[0] if len(parts) > 1 else ""


def _humanise(name: str) -> str:
    words = " ".join(re.split(r"[-_\s]+", name)).strip()
    return words[:1].upper() + words[1:] if words else ""


def derive_title(
    file_path: str, *, content_dir: str = "content", language_dirs: Collection[str] = ("en",)
) -> str:
    parts = _content_parts(file_path, content_dir, language_dirs)
    if not parts:
        return ""
    stem = _stem(parts[-1])
    if stem in ("_index", "index"):
        return _humanise(parts[-2]) if len(parts) > 1 else "Home"
    return _humanise(stem)


# --- the page -----------------------------------------------------------------------


def parse_page(
    repository: str,
    file_path: str,
    text: str,
    *,
    content_dir: str = "content",
    language_dirs: Collection[str] = ("en",),
    site: Site | None = None,
) -> Page:
    """Parse one content file. Never raises; malformed front matter is logged and dropped.

    With a `site` (hetriever.discover.site), the page's language, URL and section follow the site's
    configuration; without one, the content dir and `language_dirs` decide as before."""
    fmt, raw, body, error = split_front_matter(text)
    data: dict[str, Any] = {}
    if fmt and not error:
        data, error = _load(fmt, raw)
    if error:
        log.warning("front_matter_invalid", repository=repository, path=file_path, error=error)
    front_matter = normalise_front_matter(data)
    where = site.locate(file_path) if site is not None else None
    # Paths below the content root decide URL, section and derived title.
    path_for_url, base, dirs = file_path, content_dir, language_dirs
    prefix = lang = translation_key = ""
    if site is not None and where is not None:
        path_for_url, base, dirs = where.relative, "", ()
        prefix, lang = site.url_prefix(where.lang), where.lang
        key = data.get("translationKey") or data.get("translationkey")
        translation_key = (
            str(key) if isinstance(key, (str, int)) and str(key).strip() else where.translation_key
        )
    title = str(front_matter.get("title") or front_matter.get("linkTitle") or "") or derive_title(
        path_for_url, content_dir=base, language_dirs=dirs
    )
    tags = front_matter.get("tags", [])
    url = page_url(path_for_url, front_matter, content_dir=base, language_dirs=dirs)
    explicit = isinstance(front_matter.get("url"), str) and str(front_matter["url"]).strip()
    if site is not None and where is not None and not explicit:
        url = _permalink(site, lang, path_for_url, front_matter, title) or url
    if site is not None and not explicit:
        if (
            site.ugly_urls
            and url != "/"
            and _stem(posixpath.basename(path_for_url)) not in ("_index", "index")
        ):
            url = url.rstrip("/") + ".html"
        url = (prefix + url) if prefix else url
    elif site is not None and where is not None and "://" not in url:
        # A front-matter url is relative to the baseURL; in a multilingual site one without a
        # leading slash is relative to the language's prefix too (Hugo's URL management).
        under_lang = site.multilingual and not str(front_matter["url"]).strip().startswith("/")
        url = (site.url_prefix(lang) if under_lang else site.base_path_of(lang)) + url
    return Page(
        repository=repository,
        file_path=file_path,
        url=url,
        title=title,
        lang=lang,
        translation_key=translation_key,
        in_site=site is None or where is not None,
        kind_disabled=site is not None and _kind(path_for_url) in site.disabled_kinds,
        section=page_section(path_for_url, content_dir=base, language_dirs=dirs),
        body=body,
        front_matter=front_matter,
        tags=[str(t) for t in tags] if isinstance(tags, list) else [],
        draft=bool(front_matter.get("draft", False)),
        front_matter_error=error,
        params=page_params(data),
        cascade=cascade_params(data),
        publish=page_facts(data, site.rules.extra_keys if site is not None else ()),
    )


def public_metadata(page: Page) -> dict[str, MetadataValue]:
    """The page's front matter without the keys kept only for skip rules."""
    return {k: v for k, v in page.front_matter.items() if k not in INTERNAL_KEYS}


def skip_reason(page: Page, *, include_drafts: bool = False) -> str | None:
    """Why the page must not be indexed, or None. Empty bodies are judged after cleaning."""
    if not page.in_site:
        return "not in a content root of the site (language disabled or not mounted)"
    if page.kind_disabled:
        return "its kind is in the site's disableKinds"
    if page.draft and not include_drafts:
        return "draft"
    directories = page.file_path.replace("\\", "/").split("/")[:-1]
    if any(d.startswith("_") for d in directories):
        return "snippet (not a page)"
    if page.front_matter.get("build_render") in ("link", "never"):
        return "redirect stub"
    if page.front_matter.get("redirect") and not _HTML_COMMENT.sub("", page.body).strip():
        return "redirect stub"
    if page.front_matter.get("headless") is True:
        return "headless bundle"
    return None
