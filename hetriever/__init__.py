"""hetriever: hybrid search indexes of Hugo documentation sites, kept in step with git.

The pipeline's stages each live in the module named after them:
discover -> parse -> clean -> chunk -> embed -> store (bm25, chroma) -> search,
with `indexing` owning the incremental algorithm that ties them together.
"""

from hetriever.core.malloc import limit_arenas

__all__ = ["__version__"]

__version__ = "0.1.0"

# Before onnxruntime and Chroma start their threads (see hetriever.core.malloc).
limit_arenas()
