"""A search at the prompt embeds one query and exits: the session it loads runs without
spinning threads and gives the same vectors as a searching process's spinning one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hetriever.embed import embedder as embedder_module
from hetriever.embed.embedder import MiniLMEmbedder, embedding_one_query

QUERIES = ["how do I add a menu entry", "range over pages sorted by date", "RelPermalink"]
SPINNING = "session.intra_op.allow_spinning"


def _spinning(embedder: MiniLMEmbedder) -> str:
    """The session's spinning entry ("" where it is onnxruntime's default: spinning)."""
    (session,) = embedder._sessions.values()
    try:
        return session.get_session_options().get_session_config_entry(SPINNING)
    except RuntimeError:  # "does not have configuration with key": onnxruntime's default
        return ""


def test_a_one_query_session_does_not_spin_and_embeds_alike(
    minilm_embedder: MiniLMEmbedder, minilm_model_dir: Path
) -> None:
    assert minilm_embedder is not None  # the session-wide model, built once
    warm = MiniLMEmbedder(minilm_model_dir, threads=2)
    with embedding_one_query():
        once = MiniLMEmbedder(minilm_model_dir, threads=2)
        once_vectors = [once.embed([q]) for q in QUERIES]
    assert not embedder_module._one_query  # only while the search ran
    warm_vectors = [warm.embed([q]) for q in QUERIES]  # loaded after: spinning as before
    assert _spinning(once) == "0"
    assert _spinning(warm) == ""
    for a, b in zip(once_vectors, warm_vectors):
        np.testing.assert_array_equal(a, b)
