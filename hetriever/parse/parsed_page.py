"""A content file, parsed: the parse stage's output, which clean and chunk read."""

from __future__ import annotations

from dataclasses import dataclass, field

from hetriever.core.models import Metadata, _Serialisable
from hetriever.discover.publish_rules import PageFacts


@dataclass
class Page(_Serialisable):
    """One content file, parsed: front matter normalised, body still raw Hugo Markdown."""

    repository: str
    file_path: str  # repo-relative POSIX path, e.g. "content/en/functions/where.md"
    url: str  # public URL path as Hugo would publish it, e.g. "/functions/where/"
    title: str  # front matter title, else derived from the file name
    section: str  # first path segment under the content dir ("" for the home page)
    body: str  # Markdown after the front matter
    front_matter: Metadata = field(default_factory=dict)  # kept keys, Chroma-valid values
    tags: list[str] = field(default_factory=list)
    draft: bool = False
    front_matter_error: str = ""  # set when front matter was malformed and dropped
    # Every scalar of the raw front matter by dotted, lower-case key ("vers.otel"), and those
    # under `params:` without the prefix: what `{{% param "name" %}}` reads.
    params: dict[str, str] = field(default_factory=dict)
    lang: str = ""  # the page's language ("" when parsed without a site)
    # Shared by a page and its translations: `translationKey`, else the language-free path.
    translation_key: str = ""
    in_site: bool = True  # False: in no content root of the site (e.g. a disabled language)
    kind_disabled: bool = False  # the site's disableKinds names its kind (page, section, home)
    # What the page's `cascade` front matter passes down to its descendants' `param` lookups
    # (same keys as `params`); a section's `_index.md` sets it.
    cascade: dict[str, str] = field(default_factory=dict)
    # What its front matter says about publishing it (build options, draft, dates, headless,
    # cascade): `hetriever.discover.publish_rules` judges it with its ancestors'.
    publish: PageFacts = field(default_factory=PageFacts)
