"""The site configuration as Hugo reads it (hetriever.discover.site): languages, roots, URLs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hetriever.core.errors import ConfigurationError
from hetriever.discover.site import Site, load_site
from hetriever.parse.page import parse_page, skip_reason
from tests.support.helpers import corpus_version, site_of


def page(site: Site, path: str, front_matter: str = "title: T") -> object:
    return parse_page("docs", path, f"---\n{front_matter}\n---\nBody text.\n", site=site)


def test_without_configuration_the_site_is_english_with_an_en_directory_dropped():
    site = site_of({"content/en/docs/a.md": ""})
    assert not site.configured and site.languages == ("en",)
    p = page(site, "content/en/docs/a.md")
    assert (p.lang, p.url, p.section) == ("en", "/docs/a/", "docs")
    assert page(site, "content/docs/_index.md").url == "/docs/"


def test_a_content_directory_per_language():
    config = """
defaultContentLanguage = "en"
[languages.en]
contentDir = "content/en"
weight = 1
[languages.fr]
contentDir = "content/fr"
weight = 2
"""
    site = site_of({"hugo.toml": config, "content/en/x.md": "", "content/fr/x.md": ""})
    assert site.configured and site.languages == ("en", "fr") and site.default_lang == "en"
    en, fr = page(site, "content/en/docs/x.md"), page(site, "content/fr/docs/x.md")
    assert (en.lang, en.url) == ("en", "/docs/x/")
    assert (fr.lang, fr.url, fr.section) == ("fr", "/fr/docs/x/", "docs")
    assert en.translation_key == fr.translation_key == "docs/x"
    # _index, page bundles and slugs, under the language prefix
    assert page(site, "content/fr/docs/_index.md").url == "/fr/docs/"
    assert page(site, "content/fr/_index.md").url == "/fr/"
    assert page(site, "content/fr/blog/post/index.md").url == "/fr/blog/post/"
    assert page(site, "content/fr/docs/x.md", "title: T\nslug: autre").url == "/fr/docs/autre/"


def test_translation_by_file_name_and_the_default_language_in_a_subdirectory():
    config = (
        "defaultContentLanguage: en\ndefaultContentLanguageInSubdir: true\n"
        "languages:\n  en: {weight: 1}\n  de: {weight: 2}\n"
    )
    site = site_of({"hugo.yaml": config})
    en, de = page(site, "content/about.md"), page(site, "content/about.de.md")
    assert (en.lang, en.url) == ("en", "/en/about/")
    assert (de.lang, de.url) == ("de", "/de/about/")
    assert en.translation_key == de.translation_key == "about"
    # A dotted name that is not a language stays a page of the default language.
    assert page(site, "content/notes.v2.md").lang == "en"
    # translationKey in front matter links pages whatever their paths
    linked = page(site, "content/ueber.de.md", "title: T\ntranslationKey: about-page")
    assert linked.translation_key == "about-page"


def test_disabled_languages_are_left_out_with_a_reason():
    config = (
        "defaultContentLanguage: en\nlanguages:\n  en: {contentDir: content/en}\n"
        "  ja: {contentDir: content/ja, disabled: true}\n"
    )
    site = site_of({"hugo.yaml": config, "content/en/a.md": "", "content/ja/a.md": ""})
    assert site.languages == ("en",)
    ja = page(site, "content/ja/a.md")
    assert not ja.in_site and "language disabled" in skip_reason(ja)


def test_mounts_by_lang_or_sites_matrix_and_what_is_left_out():
    files = {
        "config/_default/hugo.yaml": "defaultContentLanguage: en\nbaseURL: https://x.io/docs/\n",
        "config/_default/languages.yaml": "en: {weight: 1}\nja: {weight: 2}\nzh: {weight: 3}\n",
        "config/_default/module.yaml": """
mounts:
  - {source: content/en, target: content}
  - {source: content/ja, target: content, lang: ja}
  - source: content/zh
    target: content
    sites: {matrix: {languages: [zh]}}
  - {source: tmp/specs, target: content/docs/specs}
  - {source: content/en/docs, target: content/docs, sites: {matrix: {languages: [zh]}}}
  - {source: missing/dir, target: content, lang: ja}
  - {source: assets, target: assets}
""",
        "content/en/a.md": "",
        "content/ja/a.md": "",
        "content/zh/a.md": "",
    }
    site = site_of(files)
    assert site.languages == ("en", "ja", "zh") and site.base_path_of("ja") == "/docs"
    assert {(r.source, r.lang) for r in site.roots} == {
        ("content/en", "en"),
        ("content/ja", "ja"),
        ("content/zh", "zh"),
    }
    assert len(site.notes) == 3  # the sub-path mounts and the missing source
    assert any("missing/dir" in n and "not in the repository" in n for n in site.notes)
    assert page(site, "content/ja/guide/_index.md").url == "/docs/ja/guide/"
    assert page(site, "content/en/guide/x.md").url == "/docs/guide/x/"


def test_the_module_template_is_read_when_no_module_file_exists():
    files = {
        "hugo.yaml": "languages: {en: {}, es: {}}\n",
        "config/_default/module-template.yaml": "mounts:\n  - {source: content/en, target: content}\n"
        "  - {source: content/es, target: content, sites: {matrix: {languages: [es]}}}\n",
        "content/en/a.md": "",
        "content/es/a.md": "",
    }
    site = site_of(files)
    assert page(site, "content/es/a.md").url == "/es/a/"


def test_ugly_urls():
    site = site_of({"hugo.toml": "uglyURLs = true\n"})
    assert page(site, "content/docs/x.md").url == "/docs/x.html"
    assert page(site, "content/docs/_index.md").url == "/docs/"


@pytest.mark.parametrize(
    "base_url, absolute, path",
    [
        ("https://example.org/docs/", "https://example.org/docs/", "/docs"),
        ("https://example.org/docs", "https://example.org/docs/", "/docs"),  # Hugo adds the slash
        ("http://example.org", "http://example.org/", ""),
        ("https://example.org/docs/?utm=1#top", "https://example.org/docs/", "/docs"),
        ("//example.org/docs/", None, "/docs"),  # a host but no scheme: no link, the same path
        ("/", None, ""),  # no host: URLs stay site-relative
        ("", None, ""),
    ],
)
def test_where_the_site_is_published_follows_its_base_url(base_url, absolute, path):
    site = site_of({"hugo.toml": f'baseURL = "{base_url}"\n'})
    assert site.absolute_base_urls() == ({"": absolute} if absolute else {})
    assert page(site, "content/functions/where.md").url == f"{path}/functions/where/"
    # a front-matter url is relative to the baseURL too
    assert page(site, "content/about.md", "title: T\nurl: /about/").url == f"{path}/about/"
    assert not site_of({"content/a.md": ""}).absolute_base_urls()  # no configuration


def test_languages_with_their_own_base_url_are_published_at_their_own_hosts():
    config = (
        'baseURL = "https://example.org/"\n[languages.en]\nweight = 1\n'
        'baseURL = "https://en.example.org/docs/"\n[languages.fr]\nweight = 2\n'
        'baseURL = "https://fr.example.org"\n[languages.de]\nweight = 3\n'
    )
    site = site_of({"hugo.toml": config})
    assert site.multihost
    assert site.absolute_base_urls() == {
        "": "https://example.org/",
        "en": "https://en.example.org/docs/",
        "fr": "https://fr.example.org/",
    }
    # no /<lang> prefix: each language has its host; each its own baseURL path
    assert page(site, "content/guide.md").url == "/docs/guide/"
    assert page(site, "content/guide.fr.md").url == "/guide/"
    assert page(site, "content/guide.de.md").url == "/guide/"  # the site's baseURL


def test_a_relative_front_matter_url_of_a_multilingual_site_is_under_its_language():
    config = (
        'baseURL = "https://example.org/docs/"\n'
        "[languages.en]\nweight = 1\n[languages.de]\nweight = 2\n"
    )
    site = site_of({"hugo.toml": config})
    assert not site.multihost
    assert page(site, "content/about.de.md", "title: T\nurl: about/").url == "/docs/de/about/"
    assert page(site, "content/about.de.md", "title: T\nurl: /about/").url == "/docs/about/"
    assert page(site, "content/about.md", "title: T\nurl: about/").url == "/docs/about/"


def test_a_malformed_configuration_names_the_file_and_the_key():
    with pytest.raises(ConfigurationError, match="hugo.yaml"):
        site_of({"hugo.yaml": "languages: [unclosed\n"})
    with pytest.raises(ConfigurationError, match="defaultContentLanguage"):
        site_of({"hugo.toml": 'defaultContentLanguage = "fr"\n[languages.en]\n'})
    with pytest.raises(ConfigurationError, match="`languages`"):
        site_of({"config/_default/hugo.yaml": "languages: [en, fr]\n"})


# --- the real multilingual site ----------------------------------------------------------


@pytest.mark.corpus
def test_opentelemetry_site_pages_are_where_hugo_publishes_them():
    root = corpus_version("opentelemetry-io", "v2-site")

    def read(path: str) -> str | None:
        f = root / path
        return f.read_text(encoding="utf-8") if f.is_file() else None

    listed = [f"config/_default/{p.name}" for p in (root / "config/_default").iterdir()]
    site = load_site(read, listed, lambda d: (root / d).is_dir())
    assert site.default_lang == "en" and len(site.languages) == 11
    assert not site.in_subdir and site.base_path_of("en") == ""

    def url_of(path: str) -> tuple[str, str]:
        p = parse_page(
            "opentelemetry-io", path, (root / path).read_text(encoding="utf-8"), site=site
        )
        return p.lang, p.url

    assert url_of("content/en/_index.md") == ("en", "/")
    assert url_of("content/en/docs/concepts/_index.md") == ("en", "/docs/concepts/")
    assert url_of("content/ja/_index.md") == ("ja", "/ja/")
    assert url_of("content/ja/docs/concepts/_index.md") == ("ja", "/ja/docs/concepts/")
    assert url_of("content/zh/docs/concepts/glossary.md") == ("zh", "/zh/docs/concepts/glossary/")
    # a page bundle
    assert url_of("content/ja/blog/2023/otel-arrow/index.md") == ("ja", "/ja/blog/2023/otel-arrow/")
    assert url_of("content/es/docs/_index.md") == ("es", "/es/docs/")
    ja = parse_page(
        "opentelemetry-io",
        "content/ja/docs/concepts/_index.md",
        (root / "content/ja/docs/concepts/_index.md").read_text(encoding="utf-8"),
        site=site,
    )
    en = parse_page(
        "opentelemetry-io",
        "content/en/docs/concepts/_index.md",
        (root / "content/en/docs/concepts/_index.md").read_text(encoding="utf-8"),
        site=site,
    )
    assert ja.translation_key == en.translation_key


def test_reading_a_site_from_a_git_commit(tmp_path: Path):
    from hetriever.discover.changes import site_at
    from hetriever.discover.repositories import Repository
    from tests.support.helpers import commit_all, init_repo, write_files

    repo_dir = init_repo(tmp_path / "site")
    write_files(
        repo_dir,
        {
            "config/_default/hugo.toml": 'defaultContentLanguage = "en"\n',
            "config/_default/languages.toml": "[en]\n[ja]\n",
            "content/x.md": "---\ntitle: X\n---\nx\n",
        },
    )
    first = commit_all(repo_dir)
    write_files(repo_dir, {"config/_default/languages.toml": "[en]\n[ja]\n[ko]\n"})
    commit_all(repo_dir)
    repo = Repository(name="site-docs", path=repo_dir)
    assert site_at(repo, first).languages == ("en", "ja")  # the commit, not the worktree
    assert site_at(repo, "HEAD").languages == ("en", "ja", "ko")
    plain = init_repo(tmp_path / "plain")
    write_files(plain, {"content/x.md": "x"})
    commit_all(plain)
    assert not site_at(Repository(name="plain-docs", path=plain), "HEAD").configured


def test_permalinks_by_section_kind_and_language():
    config = """
defaultContentLanguage = "en"
[permalinks]
posts = "/:year/:month/:slug/"
[permalinks.section]
docs = "/manual/"
[languages.en]
weight = 1
[languages.de]
weight = 2
[languages.de.permalinks.page]
posts = "/artikel/:contentbasename/"
"""
    site = site_of({"hugo.toml": config})
    post = "title: Hello World\ndate: 2024-03-05"
    assert page(site, "content/posts/hello.md", post).url == "/2024/03/hello-world/"
    assert page(site, "content/posts/hello.md", post + "\nslug: hi").url == "/2024/03/hi/"
    assert page(site, "content/posts/hello.de.md", post).url == "/de/artikel/hello/"
    assert page(site, "content/posts/trip/index.de.md", post).url == "/de/artikel/trip/"
    assert page(site, "content/docs/_index.md").url == "/manual/"
    assert page(site, "content/docs/install.md").url == "/docs/install/"  # no page pattern
    # A post without a date cannot fill :year: the default URL stays.
    assert page(site, "content/posts/undated.md").url == "/posts/undated/"


def test_disabled_kinds_are_left_out_with_a_reason():
    site = site_of({"hugo.yaml": "disableKinds: [section, taxonomy]\n"})
    section = page(site, "content/docs/_index.md")
    assert skip_reason(section) == "its kind is in the site's disableKinds"
    assert skip_reason(page(site, "content/docs/x.md")) is None
    assert skip_reason(page(site, "content/_index.md")) is None  # home is not disabled


def test_the_signature_of_a_site_is_the_same_in_every_process():
    # The catalog keeps it between runs; sets in the configuration must not reorder it.
    import subprocess
    import sys

    code = (
        "from hetriever.discover.site import Site; print(Site(disabled_kinds=frozenset("
        "{'page', 'section', 'home', 'taxonomy'}), base_url='https://x.org/').signature())"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            timeout=60,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(seen) == 1
    here, there = Site(base_url="https://x.org/"), Site(base_url="https://y.org/")
    assert here.signature() != there.signature()


def test_the_production_configuration_overrides_the_default_one(tmp_path):
    # `hugo` builds the published site as "production": config/production/ over _default/.
    from hetriever.discover.changes import site_at
    from hetriever.discover.repositories import Repository
    from tests.support.helpers import commit_all, init_repo, write_files

    repo = init_repo(tmp_path / "numbat-docs")
    write_files(
        repo,
        {
            "config/_default/hugo.toml": 'baseURL = "http://localhost:1313/"\ntitle = "Numbats"\n',
            "config/production/hugo.toml": 'baseURL = "https://numbat.example/"\n',
            "content/feeding.md": "---\ntitle: Feeding\n---\n\nTermites.\n",
        },
    )
    sha = commit_all(repo, "site")
    site = site_at(Repository(name="numbat-docs", path=repo), sha)
    assert site.absolute_base_urls() == {"": "https://numbat.example/"}
