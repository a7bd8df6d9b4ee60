"""Search quality while a vault is being embedded: bm25 against hybrid over the embedded part (issue 19).

Usage::

    python -m ops.bench.partial SET [SET ...] --model-dir DIR [--threads N] [--json]

While the background index job embeds a vault, the default search mode is either ``bm25`` or ``hybrid`` over the
chunks that have a vector so far (the others take part through BM25 only). This measures both on retrieval set
folders (``../shared/devsets``: ``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``) at several shares of the chunks
embedded, in the order the job embeds them (shortest first by the index worker's token estimate), with the
product's own pipeline in this process (:class:`memories.rag.pipeline.VaultCache`, as ``workers.index`` runs it)
and the real model's vectors (every input embedded once, then masked). Figures: nDCG@10 over the distinct records
of each ranking (:mod:`memories.rag.metrics`); they are for reading, never test assertions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from memories import worker_protocol as w
from memories.daemon.index.backends import LOCAL_RECIPE
from memories.models.embedding import estimated_tokens
from memories.models.local_onnx import LocalOnnxEmbedder
from memories.models.telemetry import disable_telemetry_environment
from memories.rag.chunk_vectors import model_input
from memories.rag.metrics import ndcg_at
from memories.rag.pipeline import VaultCache
from memories.rag.vault_index import ChunkRow

SHARES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
"""Shares of the vault's model inputs embedded, in the job's order."""


def load_set(folder: Path) -> tuple[list[dict[str, str]], list[dict[str, str]], dict[str, dict[str, int]]]:
    """``(documents, queries, qrels)`` of a retrieval set folder; qrels map query id -> document id -> grade."""
    documents = [json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query_id, document_id, grade = line.split("\t")
        qrels.setdefault(query_id, {})[document_id] = int(grade)
    return documents, queries, qrels


def build_cache(documents: list[dict[str, str]]) -> VaultCache:
    """The documents as ``rag ingest`` would store them (an untitled note is titled by its file name)."""
    cache = VaultCache("bench")
    records = []
    for document in documents:
        name = f"{document['id']}.md"
        title = document["title"] or name
        body = f"# {document['title']}\n\n{document['text']}" if document["title"] else document["text"]
        records.append(w.IndexRecord(id=document["id"], revision=1, kind="card", title=title, body=body, source=name))
    cache.apply(records, [])
    cache.stamp(1)
    return cache


def measure(folder: Path, embedder: LocalOnnxEmbedder, space: w.VectorSpace) -> dict[str, Any]:
    """nDCG@10 of bm25 and of hybrid at each share of :data:`SHARES` on one set."""
    documents, queries, qrels = load_set(folder)
    cache = build_cache(documents)
    rows: dict[str, ChunkRow] = {}
    for row, key in cache.vectors.input_keys(space):
        rows.setdefault(key, row)
    order = sorted(rows, key=lambda key: (estimated_tokens(model_input(rows[key], space.recipe).text), rows[key].rowid))
    texts = [model_input(rows[key], space.recipe).text for key in order]
    vectors = embedder.embed(texts)
    query_vectors = embedder.embed_queries([query["text"] for query in queries])
    figures: dict[str, Any] = {"set": folder.name, "documents": len(documents), "queries": len(queries)}
    for share in SHARES:
        count = round(share * len(order))
        cache.vectors.store.clear()
        if count:
            cache.vectors.store.add(space.key, order[:count], vectors[:count])
        scores: dict[str, list[float]] = {"bm25": [], "hybrid": []}
        for number, query in enumerate(queries):
            for mode in scores:
                request = w.IndexQuery(
                    vault="bench",
                    epoch=1,
                    query=query["text"],
                    mode=mode,  # type: ignore[arg-type]
                    match_mode="any",
                    limit=100,
                    cards_only=False,
                    no_rerank=False,
                    space=space if mode != "bm25" else None,
                    query_vector=query_vectors[number].tobytes() if mode != "bm25" else None,
                )
                ranked = list(dict.fromkeys(hit.asset_id for hit in cache.search(request)))
                scores[mode].append(ndcg_at(ranked, qrels.get(query["id"], {})))
        figures[f"{share:.2f}"] = {mode: round(float(np.mean(values)), 3) for mode, values in scores.items()}
        print(folder.name, share, figures[f"{share:.2f}"], file=sys.stderr, flush=True)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", type=Path)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    disable_telemetry_environment()
    embedder = LocalOnnxEmbedder(args.model_dir, threads=args.threads)
    space = w.VectorSpace(key=embedder.space_key, recipe=LOCAL_RECIPE)
    results = [measure(folder, embedder, space) for folder in args.sets]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'set':<24} {'share':>6} {'bm25':>6} {'hybrid':>7}")
    for figures in results:
        for share in SHARES:
            row = figures[f"{share:.2f}"]
            print(f"{figures['set']:<24} {share:>6.2f} {row['bm25']:>6.3f} {row['hybrid']:>7.3f}")


if __name__ == "__main__":
    main()
