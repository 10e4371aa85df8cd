"""Settings: defaults < config file (TOML) < environment variables, validated once.

One pydantic-settings model. Environment variables are `HETRIEVER_<FIELD>` (upper case), e.g.
`HETRIEVER_CHROMA_PATH`; `USE_HYBRID_SEARCH` is also read, unprefixed, as the knowledge-store
contract names it; the webhook service's settings are `HETRIEVER_WEBHOOK_<FIELD>`.
The config file is `$HETRIEVER_CONFIG`, else `./hetriever.toml` when present; its keys are the
field names below, at the top level or under a `[hetriever]` table (webhook settings under
`[hetriever.webhook]`, though its secret belongs in the environment or a secret file).
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from hetriever.core.config_sources import FileSource, MappingEnvSource, reading
from hetriever.core.errors import ConfigurationError
from hetriever.core.version_settings import VersionSpec

ENV_PREFIX = "HETRIEVER_"
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}

# MiniLM reads 256 word-pieces including [CLS] and [SEP]: 254 are left for the chunk text.
MODEL_MAX_TOKENS = 256
MINILM_NAME = "all-MiniLM-L6-v2"  # the offline model, built from a PyPI package
MODEL_SPECS = f"{MINILM_NAME!r}, 'sentence-transformers:<name-or-path>' or 'ollama:<model>'"


def _pairs(raw: Any) -> Any:
    """ "name=value,name=value" from the environment; a TOML table as it is."""
    if not isinstance(raw, str):
        return raw
    out = {}
    for pair in (p for p in raw.split(",") if p.strip()):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"expected name=value pairs, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


Pairs = Annotated[dict[str, str], NoDecode]
Origins = Annotated[list[str], NoDecode]


def _is_web_address(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _is_origin(origin: str) -> bool:
    """`scheme://host[:port]` as a browser sends it in `Origin`: no path, no wildcard."""
    if not _is_web_address(origin) or "*" in origin:
        return False
    parts = urlsplit(origin)
    try:
        parts.port  # noqa: B018 (raises on a port out of range)
    except ValueError:
        return False
    return not (parts.path or parts.query or parts.fragment or parts.username)


class _Layered(BaseSettings):
    """Init arguments > environment > config file > defaults, for every settings class here."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        table = "webhook" if issubclass(settings_cls, WebhookSettings) else None
        return (init_settings, MappingEnvSource(settings_cls), FileSource(settings_cls, table))

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_false(cls, value: Any, info: Any) -> Any:
        # An empty boolean variable (`HETRIEVER_INCLUDE_DRAFTS=`) means false, as in a shell.
        field = cls.model_fields.get(info.field_name)
        if field is not None and field.annotation in (bool, "bool") and value == "":
            return False
        return value


class WebhookSettings(_Layered):
    """The GitHub webhook service's settings (checked when the service starts)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX + "WEBHOOK_", frozen=True, extra="forbid"
    )

    secret: SecretStr = Field(
        default=SecretStr(""),
        description=(
            "the secret set on the GitHub webhook (at least 16 characters); never printed, never "
            "logged"
        ),
    )
    secret_file: Path | None = Field(
        default=None,
        description=(
            "read the secret from this file instead, e.g. a Docker secret under /run/secrets"
        ),
    )
    repos: str = Field(
        default="",
        description=(
            "`owner/name=docs-repo-name[@branch],...`: which pushes start which repository's "
            "ingest; none: every push is ignored"
        ),
    )
    deployment: str = Field(
        default="ingest/scheduled", description=("the deployment a push runs, `flow/deployment`")
    )
    # GitHub caps payloads at 25 MB; pushes are far smaller.
    max_body: int = Field(default=1024 * 1024, description="a delivery's body limit in bytes")
    # GitHub gives up on a delivery after 10 s; answer 503 before that so the failure is ours.
    prefect_timeout: float = Field(
        default=8.0, description=("seconds a delivery waits for Prefect before it is answered 503")
    )
    catalog_timeout: float = Field(
        default=1.0,
        description=(
            "seconds a delivery waits for the catalog's write lock (an ingest holds it while it "
            "writes) before it is queued and answered 202 `queued`"
        ),
    )


class Settings(_Layered):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", populate_by_name=True
    )

    # sources
    docs_root: Path = Field(
        default=Path("docs"),
        description=("parent repo with .gitmodules, or a directory of git repos"),
    )
    content_dir: str = Field(
        default="content", description=("Hugo content dir inside each documentation repository")
    )
    include_drafts: bool = Field(default=False, description="index `draft: true` pages")
    max_file_bytes: int = Field(
        default=2_000_000, description=('a larger file is skipped, "too large" its reason')
    )
    file_seconds: float = Field(
        default=120.0,
        description=(
            "one file's parse -> clean -> chunk may take this long; past it the file fails alone "
            "(its old chunks kept, retried next run) and the rest of the run goes on"
        ),
    )
    max_file_chunks: int = Field(
        default=5000,
        description=(
            "a page that would make more chunks than this is skipped with the count as its reason "
            "(the largest page of the shared corpora makes 160)"
        ),
    )
    repository_urls: Pairs = Field(
        default={},
        description=(
            "`name=URL,...`: the URL a repository is shown with (status, `/repositories`), over "
            "the one git reports"
        ),
    )
    site_urls: Pairs = Field(
        default={},
        description=(
            "`name=https://host/,...`: where a repository's site is published, for full links, "
            "over the baseURL its config has (a placeholder, one passed to `hugo --baseURL` at "
            "build time, or no configuration)"
        ),
    )
    access_levels: Pairs = Field(
        default={},
        description=(
            "`name=LEVEL,...`: a repository's access level, PUBLIC, TEAM, PRIVATE or SYSTEM"
        ),
    )
    versions: dict[str, VersionSpec] = Field(
        default={},
        description=(
            "refs a repository follows beside its checkout, each indexed and searchable as "
            "`<name>--<ref>` (docs/versions.md): JSON in the environment, "
            '`{"hugo-docs": {"refs": ["release-1.30"], "tags": "v*", "last": 3}}`, a table in '
            "the file"
        ),
    )

    # backend
    chroma_path: Path = Field(
        default=Path("chroma_data"),
        description=(
            "embedded PersistentClient directory; unset: one per docs root under the user's data "
            "directory, whatever the current directory (hetriever.core.index_location)"
        ),
    )
    chroma_host: str = Field(
        default="",
        description=(
            "set -> HttpClient server mode: a `chroma run` holds the vectors (a search over 100k "
            "chunks: 290 MB instead of 515)"
        ),
    )
    chroma_port: int = Field(default=8000, description="the Chroma server's port")
    state_dir: Path | None = Field(
        default=None,
        description=(
            "BM25 index, catalog, locks, metrics; default: <chroma_path>/../.hetriever. A second "
            "Chroma directory in the same folder needs its own (the catalog records its Chroma "
            "directory and refuses another)"
        ),
    )
    hnsw_space: str = Field(
        default="cosine", description=("HNSW distance of new collections: cosine, l2 or ip")
    )
    hnsw_construction_ef: int = Field(
        default=100, description=("HNSW's build breadth of new collections")
    )
    # bench_recall.py, recall of the 50 nearest against exact search: ef 100 -> 0.975 at 10k
    # chunks and 0.92-0.96 at 100k; ef 800 -> 0.999 and 0.998, for ~1 ms more per query.
    hnsw_search_ef: int = Field(
        default=800,
        description=(
            "HNSW's search breadth; changed in place on existing collections when a store opens "
            "them"
        ),
    )
    hnsw_m: int = Field(default=16, description="HNSW's links per node in new collections")
    chroma_timeout: float = Field(
        default=20.0,
        description=(
            "seconds any one call to a `chroma run` server may take before it is reported as frozen"
        ),
    )
    request_timeout: float = Field(
        default=20.0,
        description=(
            "seconds the servers (serve, mcp over HTTP, serve-webhook) give a client to send a "
            "request's headers, and then its whole body, before dropping the connection"
        ),
    )
    cors_origins: Origins = Field(
        default=[],
        description=(
            "web origins (`https://docs.example.org`, comma-separated) whose pages may call "
            "`hetriever serve` from the browser (CORS: the search widget on a docs site); none: "
            "only the server's own search page at `/` can"
        ),
    )
    page_api_key: SecretStr = Field(
        default=SecretStr(""),
        description=(
            "a key the search page at `/` and the widget send for every visitor who gives none: "
            "whoever can load the page searches with its levels; empty: visitors are PUBLIC unless "
            "they enter a key of their own"
        ),
    )
    # A tool call is a few kB: a line of gigabytes would otherwise be held whole.
    mcp_max_line: int = Field(
        default=4 * 1024 * 1024,
        description=("bytes one line of MCP over stdio may hold; a longer one is refused unread"),
    )
    follow: bool = Field(
        default=False,
        description=(
            "a search process that reads a Chroma server some other machine ingests into, with a "
            "state directory of its own: its catalog and BM25 index are copies it keeps in step "
            "with the manifest each ingest run publishes in Chroma (hetriever.store.replica, "
            "docs/scale-out.md)"
        ),
    )
    follow_interval: float = Field(
        default=5.0, description=("seconds a long-lived follower goes between manifest reads")
    )

    # embedding and chunking
    embedding_model: str = Field(
        default=MINILM_NAME,
        description=("all-MiniLM-L6-v2, or `sentence-transformers:<name>`, `ollama:<name>`"),
    )
    model_dir: Path | None = Field(
        default=None,
        description=("where the offline ONNX model lives; default under ~/.cache/hetriever/models"),
    )
    ollama_url: str = Field(
        default="http://127.0.0.1:11434",
        description=("the Ollama server an `ollama:<name>` model is asked"),
    )
    embed_batch_size: int = Field(default=64, description="chunks per embedding batch, at most")
    # Bounds the model's activation memory, which otherwise peaks at ~1 GB on 64 rows of 256
    # pieces. 1024 vs 2048: full ingest peak 357 vs 403 MB (hugo-docs), 421 vs 453 MB
    # (opentelemetry-io), embedding throughput 53 vs 49 chunks/s (800 real chunks, alternating
    # passes): no slower. 512 vs 1024: the embedder alone 240 vs 262-271 MB, throughput 49.0 vs
    # 47.0 chunks/s (medians).
    embed_batch_tokens: int = Field(
        default=512,
        description=(
            "padded word-pieces in the model at once (rows x longest row; split between batches "
            "run side by side): bounds the embedder's memory"
        ),
    )
    embedding_precision: str = Field(
        default="fp32",
        description=(
            "`int8`: the dynamically quantized all-MiniLM-L6-v2 (built by `prepare-model`); "
            "another model to a collection, so switching goes through `hetriever migrate`"
        ),
    )
    chunk_tokens: int = Field(
        default=MODEL_MAX_TOKENS - 2,
        description=("budget for a chunk's whole text in word-pieces, prefix included"),
    )
    min_chunk_tokens: int = Field(
        default=24, description=("shorter fragments merge into a neighbour")
    )
    page_record: str = Field(
        default="chunk",
        description=(
            "each page's title, description, keywords and section as one searchable unit: "
            "`chunk` (a chunk of its own), `prefix` (a paragraph before the body) or `off` "
            "(bench_quality)"
        ),
    )

    # writes and search
    batch_size: int = Field(
        default=100, description=("chunks per Chroma write (capped by client.get_max_batch_size())")
    )
    # Chroma pages by offset, which costs more the further in, and holds more memory the
    # larger the page: 100k chunks' metadata, embedded, idle: 100 a page 88.4 s / 338 MB
    # peak, 1,000 16.8 s / 391 MB, 2,000 11.7 s / 447 MB, 5,000 10.0 s / 625 MB (bench/).
    read_batch_size: int = Field(
        default=1_000,
        description=(
            "records per page when a whole collection is read (file lists, repair, following)"
        ),
    )
    # They are embedded in one length-sorted pass, so a larger window pads less (bench_store:
    # 256 -> 1024 cut embedding time ~12%).
    write_window: int = Field(
        default=1024,
        description=(
            "chunks gathered from finished files before one write; a crash loses at most one "
            "window of work, which the next run redoes"
        ),
    )
    use_hybrid_search: bool = Field(
        default=True,
        validation_alias=AliasChoices(
            "HETRIEVER_USE_HYBRID_SEARCH", "USE_HYBRID_SEARCH", "use_hybrid_search"
        ),
        description=(
            "dense plus BM25; false: dense only. Also read unprefixed, as the knowledge-store "
            "contract names it"
        ),
    )
    # Score fusion with dense weight 0.6 (BM25 0.4) was ahead of RRF on every query set of
    # bench_quality and is the only one that put hybrid ahead of both retrievers alone on all
    # of them (sweep of the weight and depth in bench/).
    fusion: str = Field(
        default="score",
        description=(
            "how dense and BM25 are fused (hetriever.search.fusion): `score` (weighted z-scores of "
            "each retriever's page scores) or `rrf` (reciprocal rank fusion, k = rrf_k)"
        ),
    )
    dense_weight: float = Field(
        default=0.6, description=("dense's share of score fusion (BM25 gets the rest)")
    )
    # With BM25's phrase bonus, hybrid was ahead of both retrievers on 6 of the 7 sets
    # (descriptions 0.003 behind BM25) against 4 of 7 with one weight for every query (sweep
    # of both weights and the cut, bench/).
    dense_weight_short: float = Field(
        default=0.45,
        description=(
            "dense's share for a short English query (at most short_query_terms distinct BM25 "
            "terms: titles, headings, names), which leans on the words"
        ),
    )
    short_query_terms: int = Field(
        default=6,
        description=("distinct BM25 terms of a query that is still short (dense_weight_short)"),
    )
    # bench_multilingual sweep over page titles: best weight 0.3 for ja (365 queries), 0.2-0.3
    # for zh (157), 0.4 for es (126). With a multilingual embedding model set both to
    # dense_weight.
    dense_weight_cjk: float = Field(
        default=0.3,
        description=(
            "dense's share for a search in ja, zh or ko: all-MiniLM-L6-v2 is an English model, in "
            "other languages its vectors carry less"
        ),
    )
    dense_weight_other: float = Field(
        default=0.4, description=("dense's share for a search in any other language but English")
    )
    # Fusing pages (not chunks), k = 5 beat k = 60 on every query set of bench_quality (2,800
    # queries, page MRR@10 +0.000 to +0.017; sweep of k in 1..100 in bench/).
    rrf_k: int = Field(
        default=5,
        description=(
            "reciprocal rank fusion constant (fusion = rrf); a smaller k lets a page first in one "
            "list count"
        ),
    )
    # FAQ headings MRR@10 +0.05 to +0.12, titles and descriptions up to +0.015 (sweep 0-2 in
    # bench/).
    bm25_phrase_weight: float = Field(
        default=1.5,
        description=(
            "BM25's bonus for query word pairs found in a candidate's title and headings "
            "(hetriever.store.bm25.phrases); 0 = words only"
        ),
    )
    # Real questions MRR@10 +0.03 (Hugo, 146) and +0.03 (OpenTelemetry, 30), look-ups within
    # -0.006 (sweep 0-1 in bench/).
    link_prior_weight: float = Field(
        default=0.3,
        description=(
            "page results of a question (an English query longer than short_query_terms) add this "
            "weight x the z-score of log(1 + pages linking to the page) (hetriever.parse.links); "
            "0 = off"
        ),
    )
    # Mixing sites lost MRR@10 at every margin tried (sweep in bench/, "Many sites").
    route_margin: float = Field(
        default=0.0,
        description=(
            "a search over several sites keeps those whose relevance (the mean dense similarity "
            "of their 5 nearest chunks, plus 0.3 x the query's cosine to the site's mean vector) "
            "is within this of the best site's, after a near site with far more of the query's "
            "words took the lead (hetriever.search.routing): 0 = the most relevant site only; 1 = "
            "keep every site. The sites left out only fill up a search the kept ones cannot"
        ),
    )
    group_by: str = Field(
        default="page", description=("results: one per page (best passage first), or `chunk`")
    )
    search_language: str = Field(
        default="",
        description=(
            "results' language: empty = each multilingual site's default language, or the one the "
            "query is written in (single-language sites are not filtered), a code (`ja`), or "
            "`all`"
        ),
    )
    default_top_k: int = Field(default=5, description="results of a search that asks for no number")
    search_resident_idle: float = Field(
        default=600.0,
        description=(
            "seconds the resident search process that `hetriever search` starts waits for the "
            "next search before it stops (hetriever.commands.resident); 0: every search loads the "
            "index in its own process"
        ),
    )
    max_top_k: int = Field(default=100, description="the most results one search may ask for")
    similarity_threshold: float = Field(
        default=0.0, description=("results whose score is below this are left out (0: none)")
    )
    fetch_timeout: float = Field(
        default=600.0,
        description=("seconds a fetching run's `git fetch` of one repository may take"),
    )
    run_lock_timeout: float = Field(
        default=600.0,
        description=(
            "seconds a second ingest of one repository (or of the same embedded directory) waits"
        ),
    )
    retention_days: int = Field(
        default=0,
        description=(
            "deleted files: 0 removes their chunks at once; N > 0 keeps them N days, marked "
            "`is_deleted` and hidden from every search, until `hetriever purge` removes them"
        ),
    )
    allow_mass_delete: bool = Field(
        default=False,
        description=(
            "a run that would delete more than half of a repository's chunks stops unless this is "
            "set (or `ingest --full --allow-mass-delete`): a mistyped content_dir must not wipe an "
            "index"
        ),
    )

    # search analytics (hetriever.search.analytics)
    analytics: bool = Field(
        default=False,
        description=(
            "keep what readers asked, found and opened, in <state dir>/analytics.sqlite3 "
            "(`hetriever analytics`, `/stats`)"
        ),
    )
    analytics_retention_days: int = Field(
        default=30, description=("days a recorded search and open is kept")
    )
    # bench_weak.py, 463 real questions each asked of its own corpus and of the other (where
    # nothing answers it): 0.74 flags 76% of the unanswerable searches and 11% of the answered
    # ones (the best J on the tuning part, 0.65; held out 0.67); 0.70 flags 52% and 2%.
    analytics_weak_similarity: float = Field(
        default=0.74,
        description=(
            "a query whose nearest result's dense similarity ((1 + cos) / 2) is below this is "
            "reported as weak (hetriever.search.analytics_report)"
        ),
    )

    task_runner: str = Field(
        default="threads",
        description=(
            "the Prefect ingest flow's task runner when a run names none: `threads[:N]` (one "
            "thread unless N is given: the per-file work holds the GIL, and more threads only slow "
            "the embedder), `dask` (a local cluster started for each run, shared by its "
            "repositories) or `dask:tcp://host:8786` (file tasks and embedding run on the "
            "cluster's workers, which keep the model loaded between runs; docs/scale-out.md)"
        ),
    )

    webhook: WebhookSettings = Field(
        default_factory=lambda: _webhook_settings(),
        description=("the GitHub webhook service (webhooks/service.py): HETRIEVER_WEBHOOK_<FIELD>"),
    )

    # logging
    log_format: str = Field(
        default="console", description=("`console`, or `json` for one object a line")
    )
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING or ERROR")

    @model_validator(mode="after")
    def _default_chroma_path(self) -> Settings:
        if "chroma_path" not in self.model_fields_set:
            from hetriever.core.index_location import default_chroma_path

            object.__setattr__(self, "chroma_path", default_chroma_path(self.docs_root))
            self.model_fields_set.add("chroma_path")
        return self

    @property
    def server_mode(self) -> bool:
        return bool(self.chroma_host)

    @property
    def resolved_state_dir(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        if self.server_mode:
            return Path(".hetriever")
        return (
            self.chroma_path.parent / ".hetriever" if self.chroma_path.name else Path(".hetriever")
        )

    @property
    def resolved_model_dir(self) -> Path:
        if self.model_dir is not None:
            return self.model_dir
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        return cache / "hetriever" / "models" / self.embedding_model.replace("/", "--")

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed, validated again."""
        try:
            return validate(type(self).model_validate({**dict(self), **changes}))
        except ValidationError as exc:
            raise _configuration_error(exc) from None

    @field_validator("repository_urls", "access_levels", "site_urls", mode="before")
    @classmethod
    def _parse_pairs(cls, raw: Any) -> Any:
        return _pairs(raw)

    @field_validator("repository_urls", "access_levels", "site_urls", "versions")
    @classmethod
    def _repository_names(cls, pairs: dict[str, Any]) -> dict[str, Any]:
        # Keyed by repository; a submodule directory's name (`opentelemetry.io`) names its own.
        if not pairs:
            return pairs
        from hetriever.core.names import repository_name

        return {repository_name(key): value for key, value in pairs.items()}

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _parse_origins(cls, raw: Any) -> Any:
        # As a browser sends `Origin`: lower case, no trailing slash.
        items = raw.split(",") if isinstance(raw, str) else raw
        if not isinstance(items, list):
            return raw
        return [str(o).strip().rstrip("/").lower() for o in items if str(o).strip()]

    @field_validator("docs_root", "chroma_path", "state_dir", "model_dir", mode="before")
    @classmethod
    def _not_empty(cls, raw: Any) -> Any:
        # An empty value would become Path("."): the current directory, silently.
        if isinstance(raw, str) and not raw.strip():
            raise ValueError("must not be empty (leave it unset for the default)")
        return raw

    @field_validator("docs_root", "chroma_path", "state_dir", "model_dir")
    @classmethod
    def _expand_user(cls, path: Path | None) -> Path | None:
        return None if path is None else path.expanduser()


def _webhook_settings() -> WebhookSettings:
    try:
        return WebhookSettings()
    except ValidationError as exc:  # name it as the user writes it: webhook.<field>
        raise _configuration_error(exc, prefix=("webhook",)) from None


def parse_model_spec(spec: str) -> tuple[str, str]:
    """Split a model spec: ("minilm", ""), ("sentence-transformers", name) or ("ollama", model).

    Anything else is a ConfigurationError naming the accepted forms.
    """
    spec = spec.strip()
    if spec in {MINILM_NAME, f"sentence-transformers/{MINILM_NAME}"}:
        return "minilm", ""
    kind, sep, arg = spec.partition(":")
    if sep and kind in {"sentence-transformers", "ollama"} and arg.strip():
        return kind, arg.strip()
    raise ConfigurationError(
        f"unknown embedding model {spec!r}", hint=f"set HETRIEVER_EMBEDDING_MODEL to {MODEL_SPECS}"
    )


def setting_names() -> list[str]:
    return sorted(Settings.model_fields)


_JSON_SETTINGS = {"versions"}


def _configuration_error(exc: ValidationError, prefix: tuple[str, ...] = ()) -> ConfigurationError:
    """pydantic's first complaint, as one line naming the setting and where it is set."""
    error = exc.errors()[0]
    # A field read through an alias is reported under the alias (USE_HYBRID_SEARCH).
    loc = [
        *prefix,
        *(str(part).lower().removeprefix("hetriever_") for part in error.get("loc", ())),
    ]
    name = loc[0] if loc else "?"
    dotted = ".".join(loc) or name
    raw = error.get("input")
    shown = "" if isinstance(raw, (dict, SecretStr)) or "secret" in loc else f" {raw!r}"
    # A JSON setting is one variable, whatever part of it is wrong.
    env = ENV_PREFIX + (name if name in _JSON_SETTINGS else "_".join(loc)).upper()
    return ConfigurationError(
        f"setting {dotted!r} has an invalid value{shown}: {error.get('msg', 'invalid')}",
        hint=f"set {env} or `{dotted}` in the config file to a valid value",
    )


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigurationError(
            f"config file {path} does not exist", hint="fix HETRIEVER_CONFIG or create the file"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(
            f"config file {path} cannot be read: {exc}", hint="fix the TOML syntax"
        ) from None
    data = data.get("hetriever", data)
    unknown = sorted(set(data) - set(Settings.model_fields))
    unknown += sorted(
        f"webhook.{k}" for k in set(data.get("webhook") or {}) - set(WebhookSettings.model_fields)
    )
    if unknown:
        raise ConfigurationError(
            f"config file {path} has unknown settings: {', '.join(unknown)}",
            hint=f"known settings are: {', '.join(setting_names())}",
        )
    return data


def load_settings(
    env: Mapping[str, str] | None = None, config_file: Path | None = None, **overrides: Any
) -> Settings:
    """Build validated settings from defaults, the config file, the environment and overrides."""
    env = os.environ if env is None else env
    path = config_file or (Path(env["HETRIEVER_CONFIG"]) if env.get("HETRIEVER_CONFIG") else None)
    if path is None and Path("hetriever.toml").is_file():
        path = Path("hetriever.toml")
    file_data = _read_file(path) if path is not None else {}
    for name in overrides:
        if name not in Settings.model_fields:
            raise ConfigurationError(
                f"unknown setting {name!r}",
                hint=f"known settings are: {', '.join(setting_names())}",
            )
    given = {name: raw for name, raw in overrides.items() if raw is not None}
    try:
        with reading(env, file_data):
            return validate(Settings(**given))
    except ValidationError as exc:
        raise _configuration_error(exc) from None
    except SettingsError as exc:  # a JSON setting that is no JSON
        raise ConfigurationError(
            str(exc).split(" from source ")[0].replace("error parsing", "cannot parse"),
            hint="write it as JSON, e.g. "
            'HETRIEVER_VERSIONS=\'{"hugo-docs": {"tags": "v*", "last": 3}}\'',
        ) from None


ACCESS_LEVELS = ("PUBLIC", "TEAM", "PRIVATE", "SYSTEM")


# Settings that must lie within a closed range: name -> (lowest, highest, unit in the message).
_BETWEEN: dict[str, tuple[int, int, str]] = {
    "follow_interval": (0, 86_400, " seconds"),
    "batch_size": (1, 100_000, ""),
    "read_batch_size": (1, 100_000, ""),
    "write_window": (1, 100_000, ""),
    "embed_batch_size": (1, 4096, ""),
    "embed_batch_tokens": (1, 1_000_000, ""),
    "chunk_tokens": (32, 8192, ""),
    "fetch_timeout": (1, 86_400, " seconds"),
    "run_lock_timeout": (0, 86_400, " seconds"),
    "analytics_retention_days": (1, 3_650, " days"),
    "mcp_max_line": (1024, 1024**3, " bytes"),
    "search_resident_idle": (0, 86_400, " seconds"),
    "max_file_chunks": (1, 1_000_000, ""),
}


def validate(settings: Settings) -> Settings:
    """Check ranges and combinations; raise ConfigurationError naming the setting."""

    def bad(name: str, why: str) -> ConfigurationError:
        return ConfigurationError(
            f"setting {name!r} = {getattr(settings, name)!r} is invalid: {why}",
            hint=f"fix {ENV_PREFIX}{name.upper()} or `{name}` in the config file",
        )

    for name in Settings.model_fields:  # nan passes every range check below; inf most
        value = getattr(settings, name)
        if isinstance(value, float) and not math.isfinite(value):
            raise bad(name, "must be a finite number")
    if settings.follow and not settings.server_mode:
        raise ConfigurationError(
            "setting 'follow' needs a Chroma server: the manifest it follows is published there",
            hint=f"set {ENV_PREFIX}CHROMA_HOST (and _PORT) to the server the ingest writes to",
        )
    if settings.task_runner.partition(":")[0] not in {"threads", "dask"}:
        raise bad("task_runner", 'use "threads", "threads:N", "dask" or "dask:tcp://host:port"')
    for name, (low, high, unit) in _BETWEEN.items():
        if not low <= getattr(settings, name) <= high:
            raise bad(name, f"must be between {low} and {high}{unit}")
    if settings.embedding_precision not in {"fp32", "int8"}:
        raise bad("embedding_precision", "must be fp32 or int8")
    if settings.embedding_precision == "int8" and settings.embedding_model != MINILM_NAME:
        raise bad("embedding_precision", "int8 is built for all-MiniLM-L6-v2 only")
    if not 0 <= settings.min_chunk_tokens < settings.chunk_tokens:
        raise bad("min_chunk_tokens", "must be at least 0 and below chunk_tokens")
    # the offline model, or the same model through sentence-transformers under any prefix
    minilm = settings.embedding_model.lower().endswith("all-minilm-l6-v2")
    if minilm and settings.chunk_tokens > MODEL_MAX_TOKENS - 2:
        raise bad(
            "chunk_tokens",
            f"all-MiniLM-L6-v2 reads at most {MODEL_MAX_TOKENS - 2} "
            "word-pieces per chunk; longer text would be silently truncated",
        )
    if settings.retention_days < 0:
        raise bad("retention_days", "must be zero (delete at once) or a number of days")
    if not 0 < settings.chroma_timeout <= 3_600:
        raise bad("chroma_timeout", "must be a positive number of seconds, at most 3600")
    if not 0 < settings.request_timeout <= 3_600:
        raise bad("request_timeout", "must be a positive number of seconds, at most 3600")
    if not 0 < settings.file_seconds <= 86_400:
        raise bad("file_seconds", "must be above 0 and at most 86400 seconds")
    if settings.max_file_bytes < 1:
        raise bad("max_file_bytes", "must be positive")
    if not 1 <= settings.chroma_port <= 65535:
        raise bad("chroma_port", "must be a TCP port (1..65535)")
    if settings.hnsw_space not in {"cosine", "l2", "ip"}:
        raise bad("hnsw_space", "must be cosine, l2 or ip")
    for name in ("hnsw_construction_ef", "hnsw_search_ef", "hnsw_m"):
        if getattr(settings, name) < 1:
            raise bad(name, "must be positive")
    if settings.rrf_k < 1:
        raise bad("rrf_k", "must be positive")
    if settings.bm25_phrase_weight < 0:
        raise bad("bm25_phrase_weight", "must be 0 (off) or more")
    if not 0 <= settings.link_prior_weight <= 10:
        raise bad("link_prior_weight", "must be between 0 (off) and 10")
    if not 0 <= settings.route_margin <= 1:
        raise bad("route_margin", "must be between 0 (only the nearest site) and 1 (every site)")
    if settings.fusion not in {"score", "rrf"}:
        raise bad("fusion", "must be score or rrf")
    if settings.short_query_terms < 0:
        raise bad("short_query_terms", "must be 0 (off) or more")
    for name in ("dense_weight", "dense_weight_short", "dense_weight_cjk", "dense_weight_other"):
        if not 0.0 < getattr(settings, name) < 1.0:
            raise bad(name, "must be between 0 and 1 (BM25 gets the rest)")
    if not 1 <= settings.default_top_k <= settings.max_top_k:
        raise bad("default_top_k", "must be between 1 and max_top_k")
    if not 0.0 <= settings.analytics_weak_similarity <= 1.0:
        raise bad("analytics_weak_similarity", "must be between 0 and 1")
    if not 0.0 <= settings.similarity_threshold <= 1.0:
        raise bad("similarity_threshold", "must be between 0 and 1")
    if settings.page_record not in {"chunk", "prefix", "off"}:
        raise bad("page_record", "must be chunk, prefix or off")
    if settings.group_by not in {"page", "chunk"}:
        raise bad("group_by", "must be page or chunk")
    if settings.log_format not in {"console", "json"}:
        raise bad("log_format", "must be console or json")
    if settings.log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise bad("log_level", "must be DEBUG, INFO, WARNING or ERROR")
    if (
        not settings.content_dir
        or Path(settings.content_dir).is_absolute()
        or ".." in Path(settings.content_dir).parts
    ):
        raise bad("content_dir", "must be a relative path inside the repository")
    for repo, level in settings.access_levels.items():
        if level.upper() not in ACCESS_LEVELS:
            raise bad(
                "access_levels", f"{repo}: {level!r} is not one of {', '.join(ACCESS_LEVELS)}"
            )
    for repo, url in settings.site_urls.items():
        if not _is_web_address(url):
            raise bad(
                "site_urls",
                f"{repo}: {url!r} is not an http(s) address with a host, "
                "such as https://gohugo.io/",
            )
    for origin in settings.cors_origins:
        if not _is_origin(origin):
            raise bad(
                "cors_origins",
                f"{origin!r} is not a web origin: scheme, host and "
                "port only, such as https://docs.example.org or "
                "http://localhost:1313",
            )
    if not settings.embedding_model.strip():
        raise bad("embedding_model", "must not be empty")
    try:
        parse_model_spec(settings.embedding_model)
    except ConfigurationError:
        raise bad("embedding_model", f"use {MODEL_SPECS}") from None
    return settings
