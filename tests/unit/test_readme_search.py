"""The README's first search example is true of the sample notes: a Traditional (Taiwan) query finds the Simplified
notes that write it another way (issue 21: `資料庫 遷移` had fallen to chunk rank 37, behind its Traditional twin)."""

from __future__ import annotations

import re

from memories import worker_protocol as w
from memories.rag.pipeline import VaultCache
from tests.conftest import REPO

_EXAMPLE = re.compile(r'^memories rag search notes "(?P<query>[^"]+)"\s+#.* finds (?:notes on )?(?P<found>\S+) too$')


def test_the_readme_search_example_finds_what_it_says_in_the_top_10(corpus_cache: VaultCache) -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    [example] = [match for line in lines if (match := _EXAMPLE.match(line))]
    cache = corpus_cache
    query = w.IndexQuery(  # as `rag search` sends it without a model: BM25, match mode any, 10 results, reranked
        vault="corpus", epoch=1, query=example["query"], mode="bm25", match_mode="any", limit=10, cards_only=False,
        no_rerank=False,
    )  # fmt: skip
    hits = cache.search(query)
    assert len(hits) == 10
    assert any(example["found"] in hit.text for hit in hits), [hit.asset_id for hit in hits]
