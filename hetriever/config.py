"""Settings: defaults < config file (TOML) < environment variables, validated once.

Environment variables are `HETRIEVER_<FIELD>` (upper case), e.g. `HETRIEVER_CHROMA_PATH`.
`USE_HYBRID_SEARCH` is also read, unprefixed, as the knowledge-store contract names it.
The config file is `$HETRIEVER_CONFIG`, else `./hetriever.toml` when present; its keys are the
field names below, at the top level or under a `[hetriever]` table.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hetriever.errors import ConfigurationError

ENV_PREFIX = "HETRIEVER_"
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}

# MiniLM reads 256 word-pieces including [CLS] and [SEP]: 254 are left for the chunk text.
MODEL_MAX_TOKENS = 256


@dataclass(frozen=True)
class Settings:
    # sources
    docs_root: Path = Path("docs")  # parent repo with .gitmodules, or a directory of git repos
    content_dir: str = "content"  # Hugo content dir inside each documentation repository
    include_drafts: bool = False
    max_file_bytes: int = 2_000_000
    repository_urls: dict[str, str] = field(default_factory=dict)  # name -> URL override
    access_levels: dict[str, str] = field(default_factory=dict)  # name -> PUBLIC|TEAM|...

    # backend
    chroma_path: Path = Path("chroma_data")  # embedded PersistentClient directory
    chroma_host: str = ""  # set -> HttpClient server mode
    chroma_port: int = 8000
    state_dir: Path | None = None  # BM25 index, locks, metrics; default: <chroma_path>/../.hetriever
    hnsw_space: str = "cosine"
    hnsw_construction_ef: int = 100
    # HNSW's search breadth. bench_recall.py, recall of the 50 nearest against exact search:
    # ef 100 -> 0.975 at 10k chunks and 0.92-0.96 at 100k; ef 800 -> 0.999 and 0.998, for
    # ~1 ms more per query. Changed in place on existing collections when a store opens them.
    hnsw_search_ef: int = 800
    hnsw_m: int = 16
    # Seconds any one call to a `chroma run` server may take before it is reported as frozen.
    chroma_timeout: float = 20.0
    # A search process that reads a Chroma server some other machine ingests into, with a state
    # directory of its own: its catalog and BM25 index are copies it keeps in step with the
    # manifest each ingest run publishes in Chroma (hetriever.replica, docs/scale-out.md).
    follow: bool = False
    follow_interval: float = 5.0  # seconds a long-lived follower goes between manifest reads

    # embedding and chunking
    embedding_model: str = "all-MiniLM-L6-v2"  # or "sentence-transformers:<name>", "ollama:<name>"
    model_dir: Path | None = None  # where the offline ONNX model lives; default under ~/.cache
    ollama_url: str = "http://127.0.0.1:11434"
    embed_batch_size: int = 64
    # Padded word-pieces per model call (rows x longest row): bounds the model's activation
    # memory, which otherwise peaks at ~1 GB on 64 rows of 256 pieces. 1024 vs 2048: full
    # ingest peak 357 vs 403 MB (hugo-docs), 421 vs 453 MB (opentelemetry-io), embedding
    # throughput 53 vs 49 chunks/s (800 real chunks, alternating passes): no slower.
    embed_batch_tokens: int = 1024
    # "int8": the dynamically quantized all-MiniLM-L6-v2 (built by `prepare-model`); another
    # model to a collection, so switching goes through `hetriever migrate`.
    embedding_precision: str = "fp32"
    chunk_tokens: int = MODEL_MAX_TOKENS - 2  # budget for a chunk's whole text, prefix included
    min_chunk_tokens: int = 24  # shorter fragments merge into a neighbour
    # Each page's title, description, keywords and section as one searchable unit: "chunk"
    # (a chunk of its own), "prefix" (a paragraph before the body) or "off" (bench_quality).
    page_record: str = "chunk"

    # writes and search
    batch_size: int = 100  # chunks per Chroma write (capped by client.get_max_batch_size())
    # Chunks gathered from finished files before one write: they are embedded in one
    # length-sorted pass, so a larger window pads less (bench_store: 256 -> 1024 cut embedding
    # time ~12%); a crash loses at most one window of work, which the next run redoes.
    write_window: int = 1024
    use_hybrid_search: bool = True
    # How dense and BM25 are fused (hetriever.fusion): "score" (weighted z-scores of each
    # retriever's page scores) or "rrf" (reciprocal rank fusion, k = rrf_k). Score fusion with
    # dense weight 0.6 (BM25 0.4) was ahead of RRF on every query set of bench_quality and is
    # the only one that put hybrid ahead of both retrievers alone on all of them (sweep of the
    # weight and depth in bench/README.md).
    fusion: str = "score"
    dense_weight: float = 0.6
    # all-MiniLM-L6-v2 is an English model: in other languages its vectors carry less, so
    # dense counts less when a search is in one (bench_multilingual sweep over page titles:
    # best weight 0.3 for ja (365 queries), 0.2-0.3 for zh (157), 0.4 for es (126)). With a
    # multilingual embedding model set both to dense_weight.
    dense_weight_cjk: float = 0.3  # ja, zh, ko
    dense_weight_other: float = 0.4  # any other language but English
    # Reciprocal rank fusion constant (fusion = "rrf"). Fusing pages (not chunks), k = 5 beat k = 60 on every
    # query set of bench_quality (2,800 queries, page MRR@10 +0.000 to +0.017; sweep of k in
    # 1..100 in bench/README.md); a smaller k lets a page first in one list count.
    rrf_k: int = 5
    group_by: str = "page"  # results: one per page (best passage) or "chunk"
    # Results' language: "" = each multilingual site's default language (single-language
    # sites are not filtered), a code ("ja"), or "all".
    search_language: str = ""
    default_top_k: int = 5
    max_top_k: int = 100
    similarity_threshold: float = 0.0
    run_lock_timeout: float = 600.0  # seconds a second ingest of one repository waits
    # Deleted files: 0 removes their chunks at once; N > 0 keeps them N days, marked
    # `is_deleted` and hidden from every search, until `hetriever purge` removes them.
    retention_days: int = 0
    # A run that would delete more than half of a repository's chunks stops unless this is set
    # (or `ingest --full --allow-mass-delete`): a mistyped content_dir must not wipe an index.
    allow_mass_delete: bool = False

    # The Prefect ingest flow's task runner when a run names none: "threads", "threads:N",
    # "dask" (a local cluster) or "dask:tcp://host:8786" (file tasks and embedding run on the
    # cluster's workers; docs/scale-out.md).
    task_runner: str = "threads"

    # logging
    log_format: str = "console"  # "console" or "json"
    log_level: str = "INFO"

    @property
    def server_mode(self) -> bool:
        return bool(self.chroma_host)

    @property
    def resolved_state_dir(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        if self.server_mode:
            return Path(".hetriever")
        return self.chroma_path.parent / ".hetriever" if self.chroma_path.name else Path(".hetriever")

    @property
    def resolved_model_dir(self) -> Path:
        if self.model_dir is not None:
            return self.model_dir
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        return cache / "hetriever" / "models" / self.embedding_model.replace("/", "--")

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed, validated again."""
        return validate(dataclasses.replace(self, **changes))


def _fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(Settings)}


def _coerce(name: str, raw: Any, default: Any) -> Any:
    """Turn a raw value (a string from the environment, or a TOML value) into the field's type."""
    try:
        if isinstance(default, bool) or name in {"include_drafts", "use_hybrid_search"}:
            if isinstance(raw, bool):
                return raw
            word = str(raw).strip().lower()
            if word in TRUE_WORDS:
                return True
            if word in FALSE_WORDS:
                return False
            raise ValueError(f"expected one of {sorted(TRUE_WORDS | FALSE_WORDS - {''})}")
        if isinstance(default, int):
            if isinstance(raw, bool):
                raise ValueError("expected an integer")
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, dict):
            if isinstance(raw, Mapping):
                return {str(k): str(v) for k, v in raw.items()}
            # "name=value,name=value" from the environment
            pairs = [p for p in str(raw).split(",") if p.strip()]
            out = {}
            for pair in pairs:
                key, sep, value = pair.partition("=")
                if not sep:
                    raise ValueError(f"expected name=value pairs, got {pair!r}")
                out[key.strip()] = value.strip()
            return out
        if name in {"docs_root", "chroma_path", "state_dir", "model_dir"}:
            return Path(str(raw)).expanduser()
        return str(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"setting {name!r} has an invalid value {raw!r}: {exc}",
            hint=f"set {ENV_PREFIX}{name.upper()} or `{name}` in the config file to a valid value",
        ) from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigurationError(
            f"config file {path} does not exist", hint="fix HETRIEVER_CONFIG or create the file"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"config file {path} cannot be read: {exc}",
                                 hint="fix the TOML syntax") from None
    data = data.get("hetriever", data)
    unknown = sorted(set(data) - set(_fields()))
    if unknown:
        raise ConfigurationError(
            f"config file {path} has unknown settings: {', '.join(unknown)}",
            hint=f"known settings are: {', '.join(sorted(_fields()))}",
        )
    return data


def load_settings(env: Mapping[str, str] | None = None, config_file: Path | None = None,
                  **overrides: Any) -> Settings:
    """Build validated settings from defaults, the config file, the environment and overrides."""
    env = os.environ if env is None else env
    fields = _fields()
    defaults = Settings()
    values: dict[str, Any] = {}

    path = config_file or (Path(env["HETRIEVER_CONFIG"]) if env.get("HETRIEVER_CONFIG") else None)
    if path is None and Path("hetriever.toml").is_file():
        path = Path("hetriever.toml")
    if path is not None:
        for name, raw in _read_file(path).items():
            values[name] = _coerce(name, raw, getattr(defaults, name))

    if "USE_HYBRID_SEARCH" in env:
        values["use_hybrid_search"] = _coerce("use_hybrid_search", env["USE_HYBRID_SEARCH"], True)
    for name in fields:
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = _coerce(name, env[key], getattr(defaults, name))
    for name, raw in overrides.items():
        if name not in fields:
            raise ConfigurationError(f"unknown setting {name!r}")
        if raw is not None:
            values[name] = _coerce(name, raw, getattr(defaults, name))
    return validate(Settings(**values))


ACCESS_LEVELS = ("PUBLIC", "TEAM", "PRIVATE", "SYSTEM")


def validate(settings: Settings) -> Settings:
    """Check ranges and combinations; raise ConfigurationError naming the setting."""

    def bad(name: str, why: str) -> ConfigurationError:
        return ConfigurationError(
            f"setting {name!r} = {getattr(settings, name)!r} is invalid: {why}",
            hint=f"fix {ENV_PREFIX}{name.upper()} or `{name}` in the config file",
        )

    if settings.follow and not settings.server_mode:
        raise ConfigurationError(
            "setting 'follow' needs a Chroma server: the manifest it follows is published there",
            hint=f"set {ENV_PREFIX}CHROMA_HOST (and _PORT) to the server the ingest writes to")
    if settings.task_runner.partition(":")[0] not in {"threads", "dask"}:
        raise bad("task_runner", 'use "threads", "threads:N", "dask" or "dask:tcp://host:port"')
    if not 0 <= settings.follow_interval <= 86_400:
        raise bad("follow_interval", "must be between 0 and 86400 seconds")
    if not 1 <= settings.batch_size <= 100_000:
        raise bad("batch_size", "must be between 1 and 100000")
    if not 1 <= settings.write_window <= 100_000:
        raise bad("write_window", "must be between 1 and 100000")
    if not 1 <= settings.embed_batch_size <= 4096:
        raise bad("embed_batch_size", "must be between 1 and 4096")
    if not 1 <= settings.embed_batch_tokens <= 1_000_000:
        raise bad("embed_batch_tokens", "must be between 1 and 1000000")
    if settings.embedding_precision not in {"fp32", "int8"}:
        raise bad("embedding_precision", "must be fp32 or int8")
    if settings.embedding_precision == "int8" and settings.embedding_model != "all-MiniLM-L6-v2":
        raise bad("embedding_precision", "int8 is built for all-MiniLM-L6-v2 only")
    if not 32 <= settings.chunk_tokens <= 8192:
        raise bad("chunk_tokens", "must be between 32 and 8192")
    if not 0 <= settings.min_chunk_tokens < settings.chunk_tokens:
        raise bad("min_chunk_tokens", "must be at least 0 and below chunk_tokens")
    if settings.embedding_model == "all-MiniLM-L6-v2" and settings.chunk_tokens > MODEL_MAX_TOKENS - 2:
        raise bad("chunk_tokens", f"all-MiniLM-L6-v2 reads at most {MODEL_MAX_TOKENS - 2} "
                                  "word-pieces per chunk; longer text would be silently truncated")
    if settings.retention_days < 0:
        raise bad("retention_days", "must be zero (delete at once) or a number of days")
    if settings.run_lock_timeout < 0:
        raise bad("run_lock_timeout", "must be zero or more seconds")
    if not settings.chroma_timeout > 0:
        raise bad("chroma_timeout", "must be a positive number of seconds")
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
    if settings.fusion not in {"score", "rrf"}:
        raise bad("fusion", "must be score or rrf")
    for name in ("dense_weight", "dense_weight_cjk", "dense_weight_other"):
        if not 0.0 < getattr(settings, name) < 1.0:
            raise bad(name, "must be between 0 and 1 (BM25 gets the rest)")
    if not 1 <= settings.default_top_k <= settings.max_top_k:
        raise bad("default_top_k", "must be between 1 and max_top_k")
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
    if not settings.content_dir or Path(settings.content_dir).is_absolute() or ".." in Path(
            settings.content_dir).parts:
        raise bad("content_dir", "must be a relative path inside the repository")
    for repo, level in settings.access_levels.items():
        if level.upper() not in ACCESS_LEVELS:
            raise bad("access_levels", f"{repo}: {level!r} is not one of {', '.join(ACCESS_LEVELS)}")
    if not settings.embedding_model.strip():
        raise bad("embedding_model", "must not be empty")
    return settings
