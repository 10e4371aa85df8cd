"""fp32 vs int8 all-MiniLM-L6-v2: texts/s on real chunks, how close the vectors are, and
whether a text's vector depends on the batch it is embedded in.

    python -m bench.embedding.bench_precision [--chunks 600] [--repeat 3] [--json]
    HETRIEVER_BENCH_CANDIDATES=1 python -m bench.embedding.bench_precision --chunks 200

With HETRIEVER_BENCH_CANDIDATES=1 the other builds this CPU could run are measured beside
them (built into a temporary directory, never the product's): fp16 (every float tensor in
half precision, inputs and outputs kept; onnxruntime.transformers.float16), int8 with
unsigned weights (u8u8: dynamic quantization with QUInt8 weights), the int8 build before
per-token activations (int8-per-batch: onnxruntime's dynamic quantization, signed weights per
channel, one activation scale per batch), and bf16 is tried (a
bfloat16 MatMul session: onnxruntime's CPU provider has no such kernel).

The chunks are a seeded sample of hugo-docs v2's real chunks (bench/common.py runs the corpus
through the real pipeline), so lengths are those an ingest embeds. Both embedders use the
settings' defaults (threads, batch rows, batch token cap); passes alternate between them so a
shared machine's drifting load hits both alike; each figure is the median pass. Retrieval
quality of the two is bench_quality.py's job (run it with HETRIEVER_EMBEDDING_PRECISION).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]

from bench.common import embedding_bench_args, settings_embedder  # noqa: E402
from hetriever.embed.embedder import default_threads  # noqa: E402


def candidate_embedders(fp32_model: Path) -> dict:
    """fp16, u8u8 and int8-per-batch builds of the model, in a temporary directory, each in an embedder made
    as the product's (only its model file differs)."""
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import float16

    where = Path(tempfile.mkdtemp(prefix="bench-precision-"))
    half = float16.convert_float_to_float16(onnx.load(str(fp32_model)), keep_io_types=True)
    onnx.save(half, str(where / "fp16.onnx"), save_as_external_data=True, location="fp16.onnx.data")
    # onnxruntime's dynamic quantization (one activation scale per batch), per-channel weights:
    # unsigned, and signed as the int8 build was before per-token activations.
    dynamic = {"u8u8": QuantType.QUInt8, "int8-per-batch": QuantType.QInt8}
    for name, weight_type in dynamic.items():
        quantize_dynamic(
            str(fp32_model),
            str(where / f"{name}.onnx"),
            weight_type=weight_type,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            use_external_data_format=True,
        )
    out = {}
    for name in ("fp16", *dynamic):
        embedder = settings_embedder(precision="fp32")
        embedder._model_path = where / f"{name}.onnx"
        out[name] = embedder
    return out


def bf16_verdict() -> str:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "bf16",
        [
            helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [4, 8]),
            helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [8, 4]),
        ],
        [helper.make_tensor_value_info("c", TensorProto.BFLOAT16, [4, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:
        return f"not runnable: {str(exc).splitlines()[0][:160]}"
    return "runnable"


def main() -> int:
    setup = embedding_bench_args(__doc__.splitlines()[0], chunks=600)
    if setup is None:
        return 1
    args, texts = setup
    embedders = {p: settings_embedder(precision=p) for p in ("fp32", "int8")}
    if os.environ.get("HETRIEVER_BENCH_CANDIDATES"):
        embedders.update(candidate_embedders(embedders["fp32"]._model_path))
    vectors = {p: e.embed(texts) for p, e in embedders.items()}  # also the warm-up
    seconds: dict[str, list[float]] = {p: [] for p in embedders}
    for round_no in range(args.repeat):
        order = list(embedders.items())
        for p, e in order if round_no % 2 == 0 else reversed(order):
            began = time.perf_counter()
            e.embed(texts)
            seconds[p].append(time.perf_counter() - began)
    cosines = (vectors["fp32"] * vectors["int8"]).sum(axis=1)
    nearest = vectors["fp32"] @ vectors["fp32"].T
    nearest_q = vectors["int8"] @ vectors["int8"].T
    np.fill_diagonal(nearest, -1)
    np.fill_diagonal(nearest_q, -1)
    report = {
        "chunks": len(texts),
        "threads": default_threads(),
        "repeat": args.repeat,
        "texts_per_s": {p: round(len(texts) / statistics.median(s), 1) for p, s in seconds.items()},
        "cosine_fp32_int8": {
            "min": round(float(cosines.min()), 4),
            "median": round(float(np.median(cosines)), 4),
        },
        # how often a chunk's nearest other chunk is the same under both models
        "same_nearest_neighbour": round(
            float(np.mean(nearest.argmax(1) == nearest_q.argmax(1))), 3
        ),
    }
    report["int8_speedup"] = round(report["texts_per_s"]["int8"] / report["texts_per_s"]["fp32"], 2)
    report["speedup_over_fp32"] = {
        p: round(report["texts_per_s"][p] / report["texts_per_s"]["fp32"], 2) for p in embedders
    }
    report["cosine_to_fp32_min"] = {
        p: round(float((vectors["fp32"] * v).sum(axis=1).min()), 4) for p, v in vectors.items()
    }
    # A vector must not depend on the batch it was embedded in: each text alone against the
    # same text among the first 40 of the sample.
    sample = texts[:40]
    report["batch_dependence_max"] = {
        p: float(
            np.abs(np.vstack([e.embed([t]) for t in sample]) - vectors[p][: len(sample)]).max()
        )
        for p, e in embedders.items()
    }
    if os.environ.get("HETRIEVER_BENCH_CANDIDATES"):
        report["bf16"] = bf16_verdict()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['chunks']} hugo-docs chunks, {report['threads']} threads, "
            f"median of {report['repeat']}"
        )
        for p, rate in report["texts_per_s"].items():
            print(
                f"  {p}: {rate:7.1f} chunks/s ({report['speedup_over_fp32'][p]:.2f}x fp32; "
                f"cosine to fp32 min {report['cosine_to_fp32_min'][p]}; alone vs in a batch "
                f"max {report['batch_dependence_max'][p]:.1e})"
            )
        if "bf16" in report:
            print(f"  bf16: {report['bf16']}")
        print(
            f"  int8 speed-up {report['int8_speedup']:.2f}x; cosine to fp32 min "
            f"{report['cosine_fp32_int8']['min']}, median {report['cosine_fp32_int8']['median']}; "
            f"same nearest neighbour {report['same_nearest_neighbour']:.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
