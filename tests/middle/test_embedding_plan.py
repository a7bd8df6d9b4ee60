"""How ``rag index`` batches the local model's plan (issue 11): the index worker names a plan of missing inputs,
the embedding worker counts their tokens, and each batch holds inputs of equal token counts. (That the budget is
checked before every batch of a plan is ``test_gate``'s budget test: its 30 notes are one plan of 4 batches.)"""

from __future__ import annotations

from memories import protocol as p
from memories import worker_protocol as w
from tests.fixtures.middle import Middle

LENGTHS = [5, 40, 12, 33, 7, 25, 18, 2, 39, 11, 29, 3, 21, 16, 36, 9, 27, 14, 31, 1]
"""Note bodies are this many ``x``; the fake counts one token per character."""


async def test_the_local_model_embeds_its_plan_in_batches_of_equal_token_counts(middle: Middle) -> None:
    for number, length in enumerate(LENGTHS):
        await middle.add("x" * length, title=f"note {number}")
    await middle.ok(p.MemorySearch(vault="notes", query="x"))  # the cache holds the vault
    batches: list[list[int]] = []

    def embed(request: w.EmbedBatch) -> w.Vectors:
        batches.append([len(text) for text in request.inputs])
        return w.Vectors(vectors=bytes(16 * len(request.inputs)), dimension=4)

    middle.fake_model(embed)  # one token per character
    report = await middle.ok(p.RagIndex(vault="notes"))
    assert (report.embedded_now, report.missing) == (len(LENGTHS), 0)
    ordered = sorted(LENGTHS)  # the fake index names inputs in record order: only the counts can sort them
    assert batches == [ordered[0:8], ordered[8:16], ordered[16:20]]
