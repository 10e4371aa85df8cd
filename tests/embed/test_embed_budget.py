"""The embedder's memory bound (token-capped batches) and its int8 variant, on the real model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from hetriever.core.config import MINILM_NAME, load_settings
from hetriever.core.errors import ConfigurationError, IndexingError
from hetriever.discover.repositories import Repository
from hetriever.embed.embedder import MiniLMEmbedder, batch_bounds
from hetriever.embed.model_build import DATA_FILE, INT8_SUBDIR, MODEL_FILE, prepare_int8
from hetriever.index.indexing import index_repository
from hetriever.index.lifecycle import migrate_repository
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import commit_all, init_repo, write_files

TEXTS = [
    "Hugo is a static site generator written in Go.",
    "Use the where function to filter a collection by a field value.",
    " ".join(
        f"Front matter sentence {i} holds the title, date and tags of a page." for i in range(40)
    ),  # past the 256-piece cap: truncated
    "OpenTelemetry collects traces, metrics and logs from your services.",
    " ".join(["Run hugo server to preview the site locally; it rebuilds on every change."] * 6),
    "The quick brown fox jumps over the lazy dog.",
]


# --- batch_bounds: pure ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_batches_respect_the_row_and_token_caps_and_cover_every_text(seed):
    rng = np.random.default_rng(seed)
    lengths = np.sort(rng.integers(3, 257, size=int(rng.integers(1, 600))))
    bounds = batch_bounds(lengths, 64, 2048)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # contiguous, no overlap
    for start, end in bounds:
        rows = end - start
        assert 1 <= rows <= 64
        assert rows == 1 or rows * lengths[start:end].max() <= 2048


def test_short_texts_still_go_in_full_batches_and_an_oversize_one_alone():
    assert batch_bounds(np.full(130, 10), 64, 2048) == [(0, 64), (64, 128), (128, 130)]
    assert batch_bounds(np.array([300]), 64, 256) == [(0, 1)]  # never zero rows
    assert batch_bounds(np.array([4, 5, 256, 256]), 64, 512) == [(0, 2), (2, 4)]
    assert batch_bounds(np.array([4, 5, 256, 256]), 64, 500) == [(0, 2), (2, 3), (3, 4)]


# --- the real model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("minilm-budget")


@pytest.fixture(scope="module")
def fp32(model_dir: Path) -> MiniLMEmbedder:
    return MiniLMEmbedder(model_dir, threads=1)


@pytest.fixture(scope="module")
def int8(model_dir: Path, fp32: MiniLMEmbedder) -> MiniLMEmbedder:
    return MiniLMEmbedder(model_dir, threads=1, precision="int8")


def test_token_capped_batches_give_the_same_vectors(model_dir, fp32):
    capped = MiniLMEmbedder(model_dir, threads=1, batch_tokens=64)  # mostly one text per call
    np.testing.assert_allclose(capped.embed(TEXTS), fp32.embed(TEXTS), atol=2e-5)


@pytest.mark.slow
def test_int8_is_its_own_model_close_to_fp32(fp32, int8):
    assert fp32.name == MINILM_NAME and int8.name == f"{MINILM_NAME}-int8"
    a, b = fp32.embed(TEXTS), int8.embed(TEXTS)
    assert b.shape == a.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.95, cosines  # quantized, not another model
    assert not np.allclose(a, b, atol=1e-4)  # and really the quantized graph
    # nearest neighbours agree: each text is closest to itself across the two models
    assert list((a @ b.T).argmax(axis=1)) == list(range(len(TEXTS)))


@pytest.mark.slow
def test_int8_model_is_built_once_beside_the_fp32_one(model_dir, int8):
    path = model_dir / INT8_SUBDIR / MODEL_FILE
    assert path.is_file()
    # the MatMul weights shrink 4x; the 47 MB word-embedding table stays fp32
    weights = (model_dir / INT8_SUBDIR / DATA_FILE).stat().st_size
    assert weights < (model_dir / "onnx" / DATA_FILE).stat().st_size * 0.7
    stamp = path.stat().st_mtime_ns
    assert prepare_int8(model_dir) == path
    assert path.stat().st_mtime_ns == stamp  # up to date: not rebuilt
    assert prepare_int8(model_dir, force=True) == path
    assert path.stat().st_mtime_ns != stamp


@pytest.mark.slow
def test_int8_runs_every_weight_matmul_in_integers(model_dir, int8):
    import onnx

    graph = onnx.load(str(model_dir / INT8_SUBDIR / MODEL_FILE), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    float_by_weight = [
        node.name
        for node in graph.node
        if node.op_type == "MatMul" and any(name in weights for name in node.input)
    ]
    assert float_by_weight == []
    # query, key, value, attention output, intermediate and output of each of six layers
    assert sum(node.op_type == "MatMulInteger" for node in graph.node) == 36


def test_an_int8_vector_depends_on_the_text_not_on_its_batch(int8):
    # Activations are quantized per token: embedding a text alone, or beside others of every
    # length, gives the same vector (a per-batch scale moved it by up to 0.028).
    together = int8.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        np.testing.assert_allclose(int8.embed([text])[0], together[i], atol=1e-6)
    np.testing.assert_allclose(int8.embed(TEXTS[::-1])[::-1], together, atol=1e-6)


def test_precision_setting_is_validated():
    assert (
        load_settings(env={"HETRIEVER_EMBEDDING_PRECISION": "int8"}).embedding_precision == "int8"
    )
    with pytest.raises(ConfigurationError, match="embedding_precision"):
        load_settings(env={"HETRIEVER_EMBEDDING_PRECISION": "int4"})
    with pytest.raises(ConfigurationError, match="all-MiniLM-L6-v2 only"):
        load_settings(
            env={
                "HETRIEVER_EMBEDDING_PRECISION": "int8",
                "HETRIEVER_EMBEDDING_MODEL": "ollama:nomic-embed-text",
            }
        )
    with pytest.raises(ConfigurationError, match="embed_batch_tokens"):
        load_settings(env={"HETRIEVER_EMBED_BATCH_TOKENS": "0"})


def test_switching_to_int8_goes_through_migrate(tmp_path, fp32, int8):
    repo_dir = init_repo(tmp_path / "repos" / "otters")
    write_files(
        repo_dir,
        {
            f"content/docs/page-{n}.md": f"---\ntitle: Page {n}\n---\n\n"
            f"Otters and herons live by river number {n}.\n"
            for n in range(3)
        },
    )
    commit_all(repo_dir, "pages")
    repo = Repository(name="otters", path=repo_dir)
    old = Store(store_settings(tmp_path), embedder=fp32)
    new = Store(
        store_settings(tmp_path, embedding_precision="int8"),
        embedder=int8,
        client=old.chroma.client,
    )
    try:
        asyncio.run(index_repository(repo, old, old.settings))
        with pytest.raises(IndexingError, match="migrate"):
            asyncio.run(index_repository(repo, new, new.settings, force_full=True))
        report = asyncio.run(migrate_repository(repo, new, new.settings))
        assert report.migrated
        meta = asyncio.run(new.get_collection_metadata("otters"))
        assert meta["embedding_model"] == f"{MINILM_NAME}-int8"
        after = asyncio.run(index_repository(repo, new, new.settings))
        assert after.completed and after.mode == "noop"  # the int8 collection is current
    finally:
        new.close_sync()
        old.close_sync()


@pytest.mark.slow
def test_a_built_model_is_readable_by_every_user(model_dir, int8):
    # An image builds the model as root and runs as another user: onnx writes its external
    # data 0600 and mkdtemp makes directories 0700, and neither may reach the prepared dirs.
    for sub in ("onnx", INT8_SUBDIR):
        directory = model_dir / sub
        assert directory.stat().st_mode & 0o005 == 0o005, directory
        for path in directory.iterdir():
            assert path.stat().st_mode & 0o004, path
