"""Long-running services and the model: `serve`, `mcp`, `serve-webhook`, `prepare-model`."""

from __future__ import annotations

import argparse
import sys

from hetriever.commands.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, cli_settings
from hetriever.core.errors import ConfigurationError, HetrieverError, UserError


def cmd_prepare_model(args: argparse.Namespace) -> int:
    """Build the offline model and its int8 variant, then run both once on a sentence."""
    from hetriever.core.config import MINILM_NAME, load_settings, parse_model_spec
    from hetriever.core.logs import get_logger
    from hetriever.embed.embedder import MiniLMEmbedder
    from hetriever.embed.model_build import (
        MODEL_FILE,
        ONNX_SUBDIR,
        PRECISIONS,
        _read_manifest,
        prepare_int8,
        prepare_model,
    )

    try:
        settings = load_settings()
        if parse_model_spec(settings.embedding_model)[0] != "minilm":
            get_logger(__name__).warning(
                "prepare_model_unused",
                embedding_model=settings.embedding_model,
                reason="the configured model is not all-MiniLM-L6-v2",
            )
        # The MiniLM location even when another model is configured (no re-validation).
        target = (
            args.model_dir
            or settings.model_copy(update={"embedding_model": MINILM_NAME}).resolved_model_dir
        )
        prepare_model(target, source_dir=args.source_dir, force=args.force)
        int8_path = prepare_int8(target, source_dir=args.source_dir, force=args.force)
        # A one-sentence smoke run proves onnxruntime can load and run what was written.
        vectors = [
            MiniLMEmbedder(target, threads=1, precision=precision).embed(
                ["hetriever prepare-model smoke test"]
            )[0]
            for precision in PRECISIONS
        ]
    except HetrieverError as exc:
        print(f"hetriever: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    manifest = _read_manifest(target / ONNX_SUBDIR) or {}
    print(f"model ready: {target / ONNX_SUBDIR / MODEL_FILE}")
    print(
        f"int8 model ready: {int8_path} (cosine to fp32 on the smoke sentence "
        f"{float(vectors[0] @ vectors[1]):.4f})"
    )
    print(
        f"  dimensions {vectors[0].shape[0]}, opset {manifest.get('opset')}, "
        f"weights sha256 {str(manifest.get('source_sha256', ''))[:16]}..."
    )
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    if args.new_key is not None:  # `--new-key ''` is a mistake to report, not a server start
        from hetriever.serve.keys import new_key

        key, line = new_key(args.new_key)
        print(key)
        print(f"add to the key file (HETRIEVER_API_KEYS_FILE): {line}", file=sys.stderr)
        return EXIT_OK
    from hetriever.serve.run import serve
    from hetriever.serve.service import Limits

    if args.max_concurrency < 1:
        raise UserError("--max-concurrency must be at least 1")
    return serve(
        cli_settings(args),
        host=args.host,
        port=args.port,
        limits=Limits(max_concurrency=args.max_concurrency),
    )


def cmd_mcp(args: argparse.Namespace) -> int:
    from hetriever.serve.run import mcp

    return mcp(cli_settings(args), transport=args.transport, host=args.host, port=args.port)


def cmd_serve_webhook(args: argparse.Namespace) -> int:
    from hetriever.core.logs import get_logger
    from webhooks.service import ENV_REPOS, WebhookConfig, serve

    cli_settings(args)  # logging as configured
    try:
        config = WebhookConfig.from_env()
    except ConfigurationError as exc:
        get_logger(__name__).error("webhook_config_invalid", error=str(exc))
        return EXIT_USAGE
    if not config.repos:
        get_logger(__name__).warning(
            "webhook_no_repositories", hint=f"set {ENV_REPOS}; every push is ignored"
        )
    serve(args.host, args.port, config)
    return EXIT_OK
