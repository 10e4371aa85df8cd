"""The process-wide caches have one owner (hetriever.core.caches) that knows each and empties it."""

import pytest

# Importing the modules that own a cache registers it.
import hetriever.embed.embedder  # noqa: F401
import hetriever.search.routing  # noqa: F401
import hetriever.store.knowledge_store  # noqa: F401
from hetriever.chunk.tokenizer import load_token_counter
from hetriever.core import caches
from hetriever.store.bm25 import analyzer


def test_every_process_cache_is_registered():
    assert caches.registered() == [
        "embedders",
        "site centroids",
        "stems",
        "stores",
        "token counters",
    ]


def test_clearing_a_cache_empties_it():
    counter = load_token_counter()
    assert load_token_counter() is counter  # cached
    analyzer.tokenize("running runners ran")
    assert analyzer._STEMS
    caches.clear("token counters", "stems")
    assert load_token_counter() is not counter
    assert not analyzer._STEMS


def test_names_are_owned_once_and_checked():
    with pytest.raises(ValueError, match="already registered"):
        caches.register("stems", lambda: None)
    with pytest.raises(KeyError, match="no process cache called nope"):
        caches.clear("nope")
