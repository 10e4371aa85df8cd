"""Shared ChromaDB fixtures: embedded stores and a `chroma run` server on 127.0.0.1."""
