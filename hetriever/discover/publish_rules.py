"""Hugo's publish rules: whether Hugo writes a page of its own for a content file, and when
that changes with time alone.

What Hugo 0.168 does, checked against its binary (tests/discover/test_publish_hugo.py):
- A page's `build` options (`render`: always / link / never, `list`: always / local / never,
  `publishResources`) come from its own front matter, else from the nearest `cascade` that
  reaches it: the page's own, then each ancestor section's, nearest first, then the site
  configuration's. A cascade applies to the section that declares it too, and front matter
  merges by top-level key: a page's own `build: {list: always}` replaces a cascaded
  `build: {render: never}` whole (render is then `always` again).
- A cascade is a map or a list of maps; an entry's `target` (older `_target`) limits it to
  pages whose path (`/docs/x`, lower case), kind, language and environment match its globs.
- `headless: true` is `render: never, list: never`. The older `_build` key is read as
  `build` (Hugo removed it in 0.145; older sites still use it).
- A draft, a page whose publish date is in the future, or one whose expiry date has passed
  is not built at all, unless the site sets `buildDrafts` / `buildFuture` / `buildExpired`.
  The publish date is `publishDate` (or `pubDate`, `published`), else `date`; the expiry
  date `expiryDate` (or `unpublishDate`); the site's `frontmatter` settings may reorder them.
  Dates without a zone are in the site's `timeZone` (UTC by default). None of these reach a
  section's descendants: a draft section's pages are still published.

`render: link` gives a page a URL but writes nothing there, so hetriever treats it as not
rendered (a result would be a link that 404s). Plain Python on plain data: `parse` gathers
each page's facts, `process` finds its ancestors', `decide` judges.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

RENDER_VALUES = ("always", "link", "never")
LIST_VALUES = ("always", "local", "never")
ENVIRONMENT = "production"  # what `hugo` builds the published site in

# Hugo's front matter date handlers, ":default" expanded (lower-case keys).
DEFAULT_DATE_KEYS = {
    "publishdate": ("publishdate", "pubdate", "published", "date"),
    "expirydate": ("expirydate", "unpublishdate"),
}
# The keys a page or a cascade carries that decide whether it is published.
_DATE_FIELDS = ("date", "publishdate", "pubdate", "published", "expirydate", "unpublishdate")
RULE_KEYS = ("build", "_build", "headless", "draft", *_DATE_FIELDS)


# --- what one page's front matter says ------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A cascade entry's page matcher: glob patterns, "" for any."""

    path: str = ""
    kind: str = ""
    lang: str = ""
    environment: str = ""
    languages: tuple[str, ...] = ()  # `sites: {matrix: {languages: [...]}}`

    def matches(self, path: str, kind: str, lang: str, environment: str = ENVIRONMENT) -> bool:
        checks = (
            (self.path, path),
            (self.kind, kind),
            (self.lang, lang),
            (self.environment, environment),
        )
        if any(pattern and not glob_match(pattern, value) for pattern, value in checks):
            return False
        return not self.languages or any(glob_match(p, lang) for p in self.languages)


@dataclass(frozen=True)
class CascadeEntry:
    target: Target
    values: tuple[tuple[str, Any], ...]  # RULE_KEYS only, lower case, JSON-friendly


@dataclass(frozen=True)
class PageFacts:
    """The publish-relevant front matter of one file: its own values (RULE_KEYS, lower case,
    dates as ISO strings) and its cascade entries."""

    values: tuple[tuple[str, Any], ...] = ()
    cascade: tuple[CascadeEntry, ...] = ()

    def get(self, key: str) -> Any:
        return dict(self.values).get(key)


def _plain(value: Any) -> Any:
    """A front matter value made JSON-friendly (dates as ISO strings), keys lower-cased."""
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k).lower(): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _rule_values(data: Mapping[str, Any], extra: Sequence[str] = ()) -> tuple[tuple[str, Any], ...]:
    lowered = {str(k).lower(): v for k, v in data.items()}
    keys = list(RULE_KEYS) + [k for k in extra if k not in RULE_KEYS]
    return tuple((key, _plain(lowered[key])) for key in keys if key in lowered)


def _target(raw: Any) -> Target:
    if not isinstance(raw, Mapping):
        return Target()
    raw = {str(k).lower(): v for k, v in raw.items()}
    sites = raw.get("sites")
    matrix = sites.get("matrix") if isinstance(sites, Mapping) else None
    listed = matrix.get("languages") if isinstance(matrix, Mapping) else None
    return Target(
        path=_text(raw.get("path")),
        kind=_text(raw.get("kind")),
        lang=_text(raw.get("lang")),
        environment=_text(raw.get("environment")),
        languages=tuple(str(x).lower() for x in listed) if isinstance(listed, list) else (),
    )


def _text(value: Any) -> str:
    return str(value).strip().lower() if isinstance(value, (str, int, float)) else ""


def cascade_entries(raw: Any, extra: Sequence[str] = ()) -> tuple[CascadeEntry, ...]:
    """A `cascade` value (a map, or a list of maps) as entries with their targets; entries
    that set none of the publish keys (RULE_KEYS and the `extra` date keys a site names)
    are left out."""
    entries = raw if isinstance(raw, list) else [raw]
    out = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        lowered = {str(k).lower(): v for k, v in entry.items()}
        target = lowered.get("target", lowered.get("_target"))
        values = _rule_values(lowered, extra)
        if values:
            out.append(CascadeEntry(_target(target), values))
    return tuple(out)


def page_facts(data: Mapping[str, Any], extra: Sequence[str] = ()) -> PageFacts:
    """The publish facts of raw (decoded, not normalised) front matter; `extra`: date keys
    the site's `frontmatter` settings name besides Hugo's (`SiteRules.extra_keys`)."""
    lowered = {str(k).lower(): v for k, v in data.items()}
    return PageFacts(_rule_values(lowered, extra), cascade_entries(lowered.get("cascade"), extra))


# --- what the site says ---------------------------------------------------------------


@dataclass(frozen=True)
class SiteRules:
    build_drafts: bool = False
    build_future: bool = False
    build_expired: bool = False
    time_zone: str = ""  # IANA name; "" is UTC
    publish_keys: tuple[str, ...] = DEFAULT_DATE_KEYS["publishdate"]
    expiry_keys: tuple[str, ...] = DEFAULT_DATE_KEYS["expirydate"]
    cascade: tuple[CascadeEntry, ...] = ()  # the configuration's own `cascade`

    @property
    def extra_keys(self) -> tuple[str, ...]:
        """Date keys the site reads besides Hugo's own."""
        return tuple(k for k in self.publish_keys + self.expiry_keys if k not in RULE_KEYS)


def date_keys(configured: Any, kind: str) -> tuple[str, ...]:
    """A `frontmatter.<kind>` handler list as front matter keys, ":default" expanded; other
    handlers (`:filename`, `:fileModTime`, `:git`) are left out: they are not in the text."""
    if not isinstance(configured, list):
        return DEFAULT_DATE_KEYS[kind]
    keys: list[str] = []
    for item in configured:
        name = str(item).strip().lower()
        expanded = (
            DEFAULT_DATE_KEYS[kind]
            if name == ":default"
            else (() if name.startswith(":") else (name,))
        )
        keys += [k for k in expanded if k not in keys]
    return tuple(keys)


def site_rules(config: Mapping[str, Any]) -> SiteRules:
    """The publish settings of a site configuration (keys lower-cased, as `hetriever.discover.site`
    reads them)."""
    front = config.get("frontmatter")
    front = front if isinstance(front, Mapping) else {}
    zone = config.get("timezone")
    rules = SiteRules(
        build_drafts=config.get("builddrafts") is True,
        build_future=config.get("buildfuture") is True,
        build_expired=config.get("buildexpired") is True,
        time_zone=str(zone).strip() if isinstance(zone, str) else "",
        publish_keys=date_keys(front.get("publishdate"), "publishdate"),
        expiry_keys=date_keys(front.get("expirydate"), "expirydate"),
    )
    return dataclasses.replace(
        rules, cascade=cascade_entries(config.get("cascade"), rules.extra_keys)
    )


def rules_json(rules: SiteRules) -> str:
    """SiteRules as one JSON string (`hetriever.discover.site.Site` keeps it, frozen and hashable)."""

    def entry(e: CascadeEntry) -> dict[str, Any]:
        return {
            "target": e.target.__dict__ | {"languages": list(e.target.languages)},
            "values": dict(e.values),
        }

    data = {
        **rules.__dict__,
        "cascade": [entry(e) for e in rules.cascade],
        "publish_keys": list(rules.publish_keys),
        "expiry_keys": list(rules.expiry_keys),
    }
    return json.dumps(data, sort_keys=True)


# A pure memo of the parse (no process cache: nothing in it can go stale).
@lru_cache(maxsize=32)
def rules_from_json(text: str) -> SiteRules:
    if not text:
        return SiteRules()
    data = json.loads(text)
    cascade = tuple(
        CascadeEntry(
            Target(**{**e["target"], "languages": tuple(e["target"]["languages"])}),
            tuple(e["values"].items()),
        )
        for e in data.pop("cascade")
    )
    return SiteRules(
        **{
            **data,
            "publish_keys": tuple(data["publish_keys"]),
            "expiry_keys": tuple(data["expiry_keys"]),
            "cascade": cascade,
        }
    )


# --- globs, as Hugo's (gobwas/glob with "/" as the separator) -------------------------------


# A pure memo of the compile (no process cache: nothing in it can go stale).
@lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i, depth = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
                i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(pattern: str, value: str) -> bool:
    """Hugo's glob matching: case-insensitive, `*` within a path segment, `**` across."""
    try:
        return _glob_regex(pattern.lower()).match(value.lower()) is not None
    except re.error:  # a malformed pattern matches nothing (Hugo would refuse the site)
        return False


# --- the decision ------------------------------------------------------------------------


def parse_date(value: Any, zone: str = "") -> dt.datetime | None:
    """A front matter date as an aware datetime; naive ones are in `zone` (UTC when "");
    None for anything that is not a date."""
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    else:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_zone(zone))
    if moment.year <= 1:  # Hugo's zero time: no date
        return None
    return moment


def _zone(name: str) -> dt.tzinfo:
    if not name:
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return dt.UTC


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return value is True or (isinstance(value, int) and not isinstance(value, bool) and value != 0)


@dataclass(frozen=True)
class Decision:
    """Whether Hugo publishes a page, and the dates that may change it without a commit."""

    render: str = "always"
    list: str = "always"
    draft: bool = False
    headless: bool = False
    publish_at: dt.datetime | None = None  # counted only when the site does not build future
    expire_at: dt.datetime | None = None  # counted only when the site does not build expired
    redirect: bool = False  # a `redirect` key: a render-link page is then a redirect stub
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # key -> who set it

    @property
    def rendered(self) -> bool:
        """Hugo writes a page of its own (time aside)."""
        return not self.draft and not self.headless and self.render == "always"

    @property
    def timed(self) -> bool:
        """Whether `now` can change the answer: a rendered page with a date that counts."""
        return self.rendered and (self.publish_at is not None or self.expire_at is not None)

    def in_window(self, now: dt.datetime) -> bool:
        if self.publish_at is not None and self.publish_at > now:
            return False
        return not (self.expire_at is not None and self.expire_at < now)

    def reason(self, now: dt.datetime) -> str | None:
        """Why Hugo publishes no page here at `now`, or None. The reason's first word (before
        ':') is its kind, as ingest reports count them."""
        if self.draft:
            return "draft"
        if self.headless:
            return "headless bundle"
        if self.render == "link":
            return (
                "redirect stub"
                if self.redirect
                else "not rendered: build.render is link (a URL, but no page)"
            )
        if self.render == "never":
            return f"not rendered: build.render is never ({self.sources.get('build', 'page')})"
        if self.publish_at is not None and self.publish_at > now:
            return f"future: publishDate {self.publish_at.isoformat()}"
        if self.expire_at is not None and self.expire_at < now:
            return f"expired: expiryDate {self.expire_at.isoformat()}"
        return None

    def published(self, now: dt.datetime) -> bool:
        return self.reason(now) is None


class Section(NamedTuple):
    """An ancestor section as the rules see it: its Hugo path, its `_index` file's facts and
    that file's language ("" for any). Since Hugo 0.150 a cascade entry without a `sites`
    (or older `lang`) target reaches only pages in its own file's language."""

    path: str
    facts: PageFacts
    lang: str = ""


def _reaches(entry: CascadeEntry, declared_in: str, path: str, kind: str, lang: str) -> bool:
    if not entry.target.matches(path, kind, lang):
        return False
    chosen = bool(entry.target.languages or entry.target.lang)
    return chosen or not declared_in or declared_in == lang


def effective_values(
    page: PageFacts,
    ancestors: Sequence[tuple[Any, ...]],
    *,
    path: str,
    kind: str,
    lang: str,
    site: SiteRules,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The page's publish keys after cascades: its own first, then its own cascade, then each
    ancestor's (`ancestors`: `Section`s or (path, facts) pairs, nearest first), then the
    site's; by top-level key. Also who set each key ("page", "cascade from /docs", "site
    cascade")."""
    values = dict(page.values)
    sources = {key: "page" for key in values}
    chain = [Section(path, page, lang)] + [Section(*a) for a in ancestors]
    for section in chain:
        for entry in section.facts.cascade:
            if _reaches(entry, section.lang, path, kind, lang):
                for key, value in entry.values:
                    if key not in values:
                        values[key] = value
                        sources[key] = f"cascade from {section.path}"
    for entry in site.cascade:
        if entry.target.matches(path, kind, lang):
            for key, value in entry.values:
                if key not in values:
                    values[key] = value
                    sources[key] = "site cascade"
    return values, sources


def decide(
    page: PageFacts,
    ancestors: Sequence[tuple[Any, ...]] = (),
    *,
    path: str = "/",
    kind: str = "page",
    lang: str = "en",
    site: SiteRules = SiteRules(),
    redirect: bool = False,
) -> Decision:
    """Hugo's verdict on one page. `path` is Hugo's (`/docs/x`, `/docs` for a section, `/`
    for home), `kind` home / section / page, `ancestors` the sections above it (`Section`:
    their Hugo path, their `_index` file's facts and language), nearest first."""
    values, sources = effective_values(page, ancestors, path=path, kind=kind, lang=lang, site=site)
    build = values.get("build", values.get("_build"))
    if "build" not in values and "_build" in sources:
        sources["build"] = sources["_build"]
    build = build if isinstance(build, Mapping) else {}
    render = _text(build.get("render")) or "always"
    listing = _text(build.get("list")) or "always"
    # Older Hugo took booleans: render: false was never, list: false never.
    render = {"true": "always", "false": "never"}.get(render, render)
    listing = {"true": "always", "false": "never"}.get(listing, listing)
    headless = _flag(values.get("headless"))
    draft = _flag(values.get("draft")) and not site.build_drafts
    publish = expire = None
    if not site.build_future:
        publish = next(
            (
                d
                for d in (parse_date(values.get(k), site.time_zone) for k in site.publish_keys)
                if d is not None
            ),
            None,
        )
    if not site.build_expired:
        expire = next(
            (
                d
                for d in (parse_date(values.get(k), site.time_zone) for k in site.expiry_keys)
                if d is not None
            ),
            None,
        )
    return Decision(
        render=render if render in RENDER_VALUES else "always",
        list=listing if listing in LIST_VALUES else "always",
        draft=draft,
        headless=headless,
        publish_at=publish,
        expire_at=expire,
        redirect=redirect,
        sources=sources,
    )


def hugo_path(relative: str) -> tuple[str, str]:
    """(Hugo's path, kind) of a content-relative file path: `docs/x.md` -> (`/docs/x`, page),
    `docs/_index.md` -> (`/docs`, section), `_index.md` -> (`/`, home), a bundle's
    `docs/b/index.md` -> (`/docs/b`, page). Lower case, as Hugo matches it."""
    parts = [p for p in relative.replace("\\", "/").split("/") if p]
    if not parts:
        return "/", "home"
    stem = parts[-1].rsplit(".", 1)[0] if "." in parts[-1] else parts[-1]
    if stem == "_index":
        dirs = parts[:-1]
        return ("/" + "/".join(dirs)).lower() if dirs else "/", "section" if dirs else "home"
    if stem == "index" and len(parts) > 1:
        return ("/" + "/".join(parts[:-1])).lower(), "page"
    return ("/" + "/".join(parts[:-1] + [stem])).lower(), "page"
