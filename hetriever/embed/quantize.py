"""The int8 model: the fp32 graph with every MatMul by a weight done in integer arithmetic.

Weights are int8 with one scale per output channel (symmetric: one scale per matrix left a
cosine to fp32 of ~0.95 on corpus chunks). Activations are quantized in the graph, **per
token**: each row of a MatMul's input (one word-piece's vector) gets its own scale, from its
own largest magnitude. So a text's vector depends on the text alone, never on the batch it
was embedded in. onnxruntime's dynamic quantization takes one scale for the whole batch: the
same chunk came out up to 0.028 apart in a coordinate from one batch to another, and a vector
must not, for an incremental run to end equal to a clean build and for a vector to be copied
between versions (`store/donors.py`). Per-token scales are also the more accurate (cosine to
fp32 on hugo-docs chunks: median 0.9980, min 0.9961, against 0.9943 / 0.9851 per batch).

Activations go in as uint8 with the zero point 128 (the symmetric int8 value + 128): the
operand type onnxruntime's fast integer kernel takes (int8 activations ran at a third of
fp32's speed). The embedding tables stay fp32: they cost no compute.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

LEVELS = 127.0  # symmetric int8: -127..127 (the zero point shifts activations to 1..255)


def _weights_int8(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[in, out] fp32 -> int8 weights and one fp32 scale per output channel."""
    scale = np.abs(weights).max(axis=0) / LEVELS
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return np.clip(np.round(weights / scale), -LEVELS, LEVELS).astype(np.int8), scale


def quantize_per_token(fp32_model: Path, target: Path, *, data_file: str) -> int:
    """Write the int8 model of the fp32 graph at `fp32_model` to `target` (weights in
    `data_file` beside it, as ONNX external data); returns the MatMuls quantized."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(fp32_model))
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    added: list[Any] = []

    def const(name: str, value: Any) -> str:
        added.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    levels = const("q_levels", np.float32(LEVELS))
    tiny = const("q_tiny", np.float32(1e-12))  # an all-zero row: scale stays finite
    shift = const("q_shift", np.float32(128.0))
    zero_point = const("q_zero_point", np.uint8(128))
    quantized_inputs: dict[str, tuple[str, str]] = {}  # activation -> (uint8, scale)
    nodes: list[Any] = []
    count = 0
    for node in graph.node:
        # activations x weight (the graph's Linear layers); q x k and probs x v stay fp32
        linear = node.op_type == "MatMul" and node.input[1] in weights
        if not linear or node.input[0] in weights:
            nodes.append(node)
            continue
        x, weight = node.input
        count += 1
        if x not in quantized_inputs:  # query, key and value share one quantized input
            p = f"q{count}"
            nodes += [
                helper.make_node("Abs", [x], [f"{p}_abs"], name=f"{p}_abs"),
                helper.make_node(
                    "ReduceMax", [f"{p}_abs"], [f"{p}_max"], name=f"{p}_max", axes=[-1]
                ),
                helper.make_node("Max", [f"{p}_max", tiny], [f"{p}_maxed"], name=f"{p}_maxed"),
                helper.make_node("Div", [f"{p}_maxed", levels], [f"{p}_scale"], name=f"{p}_scale"),
                helper.make_node("Div", [x, f"{p}_scale"], [f"{p}_scaled"], name=f"{p}_scaled"),
                helper.make_node("Round", [f"{p}_scaled"], [f"{p}_round"], name=f"{p}_round"),
                helper.make_node("Add", [f"{p}_round", shift], [f"{p}_shift"], name=f"{p}_shift"),
                helper.make_node(
                    "Cast", [f"{p}_shift"], [f"{p}_u8"], name=f"{p}_u8", to=TensorProto.UINT8
                ),
            ]
            quantized_inputs[x] = (f"{p}_u8", f"{p}_scale")
        x_u8, x_scale = quantized_inputs[x]
        w_int8, w_scale = _weights_int8(numpy_helper.to_array(weights[weight]))
        w_q, w_s = const(f"{weight}_int8", w_int8), const(f"{weight}_scale", w_scale)
        p = f"m{count}"
        nodes += [
            helper.make_node("MatMulInteger", [x_u8, w_q, zero_point], [f"{p}_i32"], name=p),
            helper.make_node(
                "Cast", [f"{p}_i32"], [f"{p}_f32"], name=f"{p}_f32", to=TensorProto.FLOAT
            ),
            helper.make_node("Mul", [f"{p}_f32", x_scale], [f"{p}_rows"], name=f"{p}_rows"),
            helper.make_node("Mul", [f"{p}_rows", w_s], [node.output[0]], name=f"{p}_out"),
        ]
    used = {name for node in nodes for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    onnx.checker.check_model(model)
    onnx.save_model(
        model,
        str(target),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data_file,
        size_threshold=1024,
    )
    return count
