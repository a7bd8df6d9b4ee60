"""``workers.embedding``: EmbeddingGemma on ONNX Runtime, loaded once, inside the daemon (R-22).

The telemetry opt-out is set first, before anything can import onnxruntime. The model loads on the first
:class:`~memories.worker_protocol.EmbedLoad` and stays loaded; the supervisor restarts this process on lock (it saw
plaintext) and after a crash, and then loads it again.
"""

from __future__ import annotations

from memories.models.telemetry import disable_telemetry_environment

disable_telemetry_environment()

from pathlib import Path  # noqa: E402  (after the opt-out, on purpose)

from memories import worker_protocol as w  # noqa: E402
from memories.models.local_onnx import LocalOnnxEmbedder  # noqa: E402
from workers.loop import Context, run_worker  # noqa: E402

_loaded: tuple[w.EmbedLoad, LocalOnnxEmbedder] | None = None


def _ensure(request: w.EmbedLoad) -> LocalOnnxEmbedder:
    """The model ``request`` names, loaded now unless it already is; raises ``model_invalid``."""
    global _loaded
    if _loaded is None or _loaded[0] != request:
        embedder = LocalOnnxEmbedder(
            Path(request.model_dir),
            threads=request.threads,
            max_tokens=request.max_tokens,
            batch_size=request.batch_size,
            manifest=request.manifest,
        )
        _loaded = (request, embedder)
    return _loaded[1]


def load(request: w.EmbedLoad, ctx: Context) -> w.ModelLoaded:
    """Load the model and report its vector space key; raises ``model_invalid``."""
    embedder = _ensure(request)
    return w.ModelLoaded(space_key=embedder.space_key, dimension=embedder.dimension, warnings=embedder.warnings)


def embed_batch(request: w.EmbedBatch, ctx: Context) -> w.Vectors:
    """float32[n, 768] for exact model inputs, sorted by token length inside the request."""
    vectors = _ensure(request.model).embed(request.inputs)
    return w.Vectors(vectors=vectors.tobytes(), dimension=vectors.shape[1])


def count_tokens(request: w.EmbedCount, ctx: Context) -> w.TokenCounts:
    """The token count of each exact model input (:meth:`LocalOnnxEmbedder.token_ids`), the graph not run."""
    embedder = _ensure(request.model)
    return w.TokenCounts(counts=[len(embedder.token_ids(text)) for text in request.inputs])


def embed_query(request: w.EmbedQuery, ctx: Context) -> w.Vectors:
    """float32[1, 768] for a search query (query prefix applied here)."""
    vectors = _ensure(request.model).embed_queries([request.query])
    return w.Vectors(vectors=vectors.tobytes(), dimension=vectors.shape[1])


if __name__ == "__main__":
    run_worker(
        "embedding",
        {w.EmbedLoad: load, w.EmbedBatch: embed_batch, w.EmbedCount: count_tokens, w.EmbedQuery: embed_query},
    )
