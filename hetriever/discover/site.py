"""The site configuration, read the way Hugo reads it: which files are pages, in which
language, and at which URL prefix they are published.

Hugo looks for `hugo.toml|yaml|json` (or the older `config.*`) at the project root and merges
`config/_default/` over it, then `config/production/` (the environment `hugo` builds the
published site in): `hugo.*`/`config.*` there are root keys, any other file is the
key it is named after (`languages.yaml` -> `languages`, `module.yaml` -> `module`). The keys
read here decide what a page is and where it goes: `contentDir`, `defaultContentLanguage`,
`defaultContentLanguageInSubdir`, `languages` (per language `contentDir`, `disabled`,
`weight`, `baseURL`), `disableLanguages`, `baseURL`, `uglyURLs`, `permalinks` (the map form,
site-wide and per language; tokens in `parse._permalink`) and `module.mounts` of content. A mount maps a source directory onto `content`, for the language its `lang` or
`sites.matrix.languages` names (opentelemetry.io mounts each `content/<lang>` so, from
`config/_default/module-template.yaml`, which its build renders as `module.yaml`: that
template is read when no `module.yaml` exists). Mounts onto a sub-path of `content` (another
language's pages published as fallbacks) and mounts whose source is missing are left out
with a note.

A page's URL is what Hugo calls its relative permalink: the baseURL's path, the language
prefix, the page's path. Hugo's full permalink is that on the baseURL's scheme and host (a
language's own baseURL in a multihost site), which `absolute_base_urls` records.

Two layouts of translations: a content directory per language, and translation by file name
(`page.fr.md` beside `page.md`). Without any configuration the site is what hetriever always
assumed: one content directory, English, and a leading `en/` directory dropped from URLs.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from hetriever.core.errors import ConfigurationError
from hetriever.core.logs import get_logger
from hetriever.discover.publish_rules import SiteRules, rules_from_json, rules_json, site_rules

log = get_logger(__name__)

CONFIG_NAMES = ("hugo", "config")
CONFIG_EXTENSIONS = ("toml", "yaml", "yml", "json")
MODULE_TEMPLATE = "config/_default/module-template.yaml"

# (path) -> text or None: reads one repository file (at the indexed commit)
ReadFile = Callable[[str], str | None]


@dataclass(frozen=True)
class ContentRoot:
    """A directory of the repository whose files are pages of one language (or, with
    `lang` empty, of any language: translation by file name, else the default)."""

    source: str  # repository-relative, no trailing slash
    lang: str = ""


@dataclass(frozen=True)
class Located:
    lang: str
    relative: str  # the path below the content root, as Hugo sees it ("docs/x.md")
    translation_key: str  # same for a page and its translations: lang-free relative path


@dataclass(frozen=True)
class Site:
    default_lang: str = "en"
    in_subdir: bool = False  # defaultContentLanguageInSubdir
    languages: tuple[str, ...] = ("en",)  # enabled, by weight
    roots: tuple[ContentRoot, ...] = (ContentRoot("content"),)
    base_url: str = ""  # baseURL as configured: "https://example.org/docs/", "/" or ""
    # Languages with a baseURL of their own. With more than one language enabled this is
    # Hugo's multihost site: each language is published at its own baseURL, without `/<lang>`.
    language_base_urls: tuple[tuple[str, str], ...] = ()
    ugly_urls: bool = False
    disabled_kinds: frozenset[str] = frozenset()  # disableKinds: "page", "section", "home"
    # Permalink patterns: (language or "" for every language, kind "page"/"section", top-level
    # section) -> pattern such as "/blog/:year/:month/:slug/".
    permalinks: tuple[tuple[str, str, str, str], ...] = ()
    configured: bool = False  # False: no config was found, today's single-language defaults
    # The publish settings (buildDrafts/Future/Expired, timeZone, frontmatter dates, the
    # configuration's cascade) as `hetriever.discover.publish_rules.rules_json`; "" for Hugo's defaults.
    publish: str = ""
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def multilingual(self) -> bool:
        return len(self.languages) > 1

    @property
    def multihost(self) -> bool:
        return self.multilingual and bool(self.language_base_urls)

    @property
    def rules(self) -> SiteRules:
        """The site's publish settings (`hetriever.discover.publish_rules`)."""
        return rules_from_json(self.publish)

    def base_url_of(self, lang: str) -> str:
        """The baseURL a language's pages are published under: its own, else the site's."""
        return dict(self.language_base_urls).get(lang, self.base_url)

    def base_path_of(self, lang: str) -> str:
        """That baseURL's path: "" or "/docs"."""
        return _base_path(self.base_url_of(lang))

    def absolute_base_urls(self) -> dict[str, str]:
        """Where the site is published, to make its site-relative URLs full links: the site's
        absolute http(s) baseURL under "", a language's own under its code; nothing for a
        baseURL such as "/" or a missing one."""
        found = {"": _absolute(self.base_url)}
        found.update((lang, _absolute(url)) for lang, url in self.language_base_urls)
        return {lang: url for lang, url in found.items() if url}

    def signature(self) -> str:
        """What decides which files are pages and where they are published, as one short
        string: when it changes, pages change that the commit's diff does not name."""
        decisive = {
            k: v for k, v in asdict(self).items() if k != "notes" and not (k == "publish" and not v)
        }
        text = json.dumps(decisive, sort_keys=True, default=sorted)  # sets, in a fixed order
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def locate(self, file_path: str) -> Located | None:
        """The language and content-relative path of a repository file, or None when the file
        is in no content root (or in a disabled language)."""
        path = file_path.replace("\\", "/").lstrip("/")
        for root in sorted(self.roots, key=lambda r: -len(r.source)):
            prefix = root.source.strip("/")
            if prefix and not (path == prefix or path.startswith(prefix + "/")):
                continue
            relative = path[len(prefix) :].lstrip("/") if prefix else path
            lang = root.lang
            if not self.configured and not lang:
                # Today's assumption for unconfigured sites: an `en/` directory is English.
                first, _, rest = relative.partition("/")
                if first == "en" and rest:
                    relative = rest
                lang = self.default_lang
            if not lang:
                lang, relative = self._by_file_name(relative)
            if lang not in self.languages:
                return None
            return Located(lang, relative, _translation_key(relative, self.languages))
        return None

    def _by_file_name(self, relative: str) -> tuple[str, str]:
        """`page.fr.md` -> ("fr", "page.md") when fr is a language of the site."""
        directory, name = posixpath.split(relative)
        stem, ext = posixpath.splitext(name)
        base, dot, code = stem.rpartition(".")
        if dot and base and code.lower() in self._known():
            return code.lower(), posixpath.join(directory, base + ext)
        return self.default_lang, relative

    def _known(self) -> set[str]:
        return {lang.lower() for lang in self.languages}

    def permalink(self, lang: str, kind: str, section: str) -> str | None:
        """The configured pattern for a page of `kind` in top-level `section`, if any (the
        language's own patterns win over the site's)."""
        found = None
        for p_lang, p_kind, p_section, pattern in self.permalinks:
            if p_kind == kind and p_section == section and p_lang in (lang, ""):
                if p_lang == lang:
                    return pattern
                found = pattern
        return found

    def url_prefix(self, lang: str) -> str:
        """What Hugo puts before a page's path: the baseURL path, then `/<lang>` for every
        language but the default (and for it too with defaultContentLanguageInSubdir); a
        multihost site tells its languages apart by their baseURLs instead."""
        if self.multihost:
            return self.base_path_of(lang)
        lang_part = f"/{lang}" if (lang != self.default_lang or self.in_subdir) else ""
        return self.base_path_of(lang) + lang_part


def _base_path(base_url: str) -> str:
    """The path of a baseURL, as Hugo puts it before every page's path: "" or "/docs" (a
    query or fragment is no part of it; `//host/docs/` has a host, and that path)."""
    if "://" not in base_url and not base_url.startswith("//"):
        return ""
    try:
        path = "/" + urlsplit(base_url).path.strip("/")
    except ValueError:  # e.g. an unclosed IPv6 host
        return ""
    return "" if path == "/" else path


def _absolute(base_url: str) -> str:
    """An http(s) baseURL with a host, ending in "/" as Hugo keeps it; "" for any other."""
    try:
        parts = urlsplit(base_url.strip())
    except ValueError:  # e.g. an unclosed IPv6 host
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return ""
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/", "", ""))


def _translation_key(relative: str, languages: Iterable[str]) -> str:
    directory, name = posixpath.split(relative)
    stem, ext = posixpath.splitext(name)
    base, dot, code = stem.rpartition(".")
    if dot and base and code.lower() in {lang.lower() for lang in languages}:
        stem = base
    return posixpath.join(directory, stem)


# --- reading the configuration -------------------------------------------------------------


def _parse(path: str, text: str) -> dict[str, Any]:
    ext = path.rsplit(".", 1)[-1].lower()
    try:
        if ext == "toml":
            data = tomllib.loads(text)
        elif ext == "json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except Exception as exc:
        raise ConfigurationError(
            f"the site configuration {path} cannot be parsed: {exc}",
            hint="fix the file (Hugo would refuse it too)",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"the site configuration {path} is not a mapping of keys",
            hint="its top level must be keys such as baseURL, languages",
        )
    return data


def _lower_keys(data: Any) -> Any:
    """Hugo's configuration keys are case-insensitive."""
    if isinstance(data, dict):
        return {str(k).lower(): _lower_keys(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_lower_keys(v) for v in data]
    return data


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def read_config(
    read: ReadFile, config_dir_files: Iterable[str]
) -> tuple[dict[str, Any], list[str]]:
    """The merged configuration (keys lower-cased) and the files it came from."""
    merged: dict[str, Any] = {}
    used: list[str] = []
    for name in CONFIG_NAMES:
        for ext in CONFIG_EXTENSIONS:
            path = f"{name}.{ext}"
            text = read(path)
            if text is not None:
                merged = _merge(merged, _lower_keys(_parse(path, text)))
                used.append(path)
                break
        if used:
            break
    listed = sorted(config_dir_files)  # config/_default/* before config/production/*
    has_module = any(posixpath.basename(p).split(".")[0] == "module" for p in listed)
    for path in listed:
        stem, _, ext = posixpath.basename(path).rpartition(".")
        if ext.lower() not in CONFIG_EXTENSIONS or path == MODULE_TEMPLATE:
            continue
        text = read(path)
        if text is None:
            continue
        data = _lower_keys(_parse(path, text))
        merged = _merge(merged, data if stem in CONFIG_NAMES else {stem.lower(): data})
        used.append(path)
    if not has_module:
        text = read(MODULE_TEMPLATE)
        if text is not None:
            merged = _merge(merged, {"module": _lower_keys(_parse(MODULE_TEMPLATE, text))})
            used.append(MODULE_TEMPLATE)
    return merged, used


def _bad(path: str, key: str, problem: str) -> ConfigurationError:
    return ConfigurationError(
        f"site configuration ({path}): `{key}` {problem}",
        hint="fix the key; Hugo would refuse it too",
    )


def _languages(config: Mapping[str, Any], where: str) -> tuple[str, list[str], dict[str, Any]]:
    default = str(config.get("defaultcontentlanguage") or "en").lower()
    raw = config.get("languages") or {}
    if not isinstance(raw, Mapping):
        raise _bad(where, "languages", "must be a mapping of language codes")
    disabled = {str(x).lower() for x in (config.get("disablelanguages") or [])}
    weights: list[tuple[float, str]] = []
    for code, entry in raw.items():
        entry = entry if isinstance(entry, Mapping) else {}
        if entry.get("disabled") is True or code in disabled:
            continue
        weight = entry.get("weight", 0)
        weights.append((float(weight) if isinstance(weight, (int, float)) else 0.0, code))
    # Hugo orders languages by weight, then code; the default comes first for hetriever.
    langs = [code for _, code in sorted(weights)]
    if not langs:
        langs = [default]
    if default not in langs:
        if raw:
            raise _bad(
                where,
                "defaultContentLanguage",
                f"{default!r} is not one of the enabled languages {sorted(langs)}",
            )
        langs = [default]
    langs = [default] + [code for code in langs if code != default]
    return default, langs, dict(raw)


def _mounts(
    config: Mapping[str, Any],
    exists: Callable[[str], bool],
    langs: list[str],
    default: str,
    notes: list[str],
) -> list[ContentRoot] | None:
    module = config.get("module") or {}
    mounts = module.get("mounts") if isinstance(module, Mapping) else None
    if not mounts:
        return None
    roots: list[ContentRoot] = []
    for mount in mounts:
        if not isinstance(mount, Mapping):
            continue
        source = str(mount.get("source") or "").strip("/")
        target = str(mount.get("target") or "").strip("/")
        if target != "content" and not target.startswith("content/"):
            continue  # assets, layouts, static, ...
        if target != "content":
            notes.append(
                f"mount {source} -> {target} left out: hetriever indexes whole "
                "content roots, not pages mounted into another language's tree"
            )
            continue
        if not source or not exists(source):
            notes.append(
                f"mount {source or '(empty)'} -> {target} left out: its source is "
                "not in the repository"
            )
            continue
        lang = str(mount.get("lang") or "").lower()
        sites = mount.get("sites")
        matrix = sites.get("matrix") if isinstance(sites, Mapping) else None
        listed = matrix.get("languages") if isinstance(matrix, Mapping) else None
        if not lang and isinstance(listed, list) and len(listed) == 1:
            lang = str(listed[0]).lower()
        lang = lang or default
        if lang not in langs:
            notes.append(
                f"mount {source} -> {target} left out: language {lang!r} is "
                "disabled or not configured"
            )
            continue
        roots.append(ContentRoot(source, lang))
    return roots


def _permalinks(config: Mapping[str, Any], lang: str) -> list[tuple[str, str, str, str]]:
    """Hugo's map form: `permalinks: {section: pattern}` (regular pages), or
    `permalinks: {page: {section: pattern}, section: {section: pattern}}`."""
    raw = config.get("permalinks")
    if not isinstance(raw, Mapping):
        return []
    out = []
    for key, value in raw.items():
        if isinstance(value, str):
            out.append((lang, "page", str(key), value))
        elif key in ("page", "section") and isinstance(value, Mapping):
            out.extend(
                (lang, str(key), str(section), str(pattern))
                for section, pattern in value.items()
                if isinstance(pattern, str)
            )
    return out


def load_site(
    read: ReadFile,
    config_dir_files: Iterable[str],
    exists: Callable[[str], bool],
    *,
    content_dir: str = "content",
) -> Site:
    """The site as Hugo would build it from the repository's configuration files. `read`
    returns a file's text or None, `config_dir_files` lists `config/_default/*` and
    `config/production/*`, `exists`
    says whether a directory is in the repository; `content_dir` is the repository setting,
    used when the configuration names none."""
    config, used = read_config(read, config_dir_files)
    if not used:
        return Site(roots=(ContentRoot(content_dir),))
    where = ", ".join(used)
    default, langs, raw = _languages(config, where)
    notes: list[str] = []
    roots = _mounts(config, exists, langs, default, notes)
    if roots is None:
        site_dir = str(config.get("contentdir") or content_dir).strip("/")
        roots = []
        for code in langs:
            entry = raw.get(code) if isinstance(raw.get(code), Mapping) else {}
            own = str((entry or {}).get("contentdir") or "").strip("/")
            if own:
                roots.append(ContentRoot(own, code))
        if not roots or len(roots) < len(langs):
            roots.append(ContentRoot(site_dir, ""))  # translation by file name, else default
    base = config.get("baseurl")
    in_subdir = config.get("defaultcontentlanguageinsubdir") is True
    permalinks = _permalinks(config, "")
    language_bases = []
    for code in langs:
        entry = raw.get(code)
        if isinstance(entry, Mapping):
            permalinks += _permalinks(entry, code)
            lang_base = entry.get("baseurl")
            if isinstance(lang_base, str) and lang_base.strip():
                language_bases.append((code, lang_base.strip()))
    if notes:
        log.info("site_config_left_out", count=len(notes), first=notes[:3])
    rules = site_rules(config)
    return Site(
        publish=rules_json(rules) if rules != SiteRules() else "",
        default_lang=default,
        in_subdir=in_subdir,
        languages=tuple(langs),
        roots=tuple(roots),
        base_url=base.strip() if isinstance(base, str) else "",
        language_base_urls=tuple(language_bases),
        ugly_urls=config.get("uglyurls") is True,
        permalinks=tuple(permalinks),
        configured=True,
        notes=tuple(notes),
        disabled_kinds=frozenset(
            str(k).lower() for k in (config.get("disablekinds") or []) if isinstance(k, str)
        ),
    )
