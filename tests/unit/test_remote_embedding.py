"""Remote embedding request bodies and reply checks (R-30, R-32) of each provider; end to end in
``tests/e2e/test_remote.py``."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import trio

from memories import worker_protocol as w
from memories.config import EmbeddingConfig, HttpConfig
from memories.daemon.index.backends import RemoteBackend
from memories.errors import MemoriesError
from memories.providers import compatible, embedding, gemini
from memories.providers.capabilities import EmbedText
from memories.providers.compatible import CompatibleEmbedding
from memories.providers.embedding import checked_matrix
from memories.providers.gemini import GeminiEmbedding

COMPATIBLE = CompatibleEmbedding(
    EmbeddingConfig(protocol="compatible", url="http://127.0.0.1/v1/embeddings", model="m", dimensions=2, batch_size=32)
)
GEMINI_BATCH = GeminiEmbedding(
    EmbeddingConfig(
        protocol="gemini",
        url="https://g.example/v1beta/models/e:batchEmbedContents",
        model="e",
        api_key_env="K",
        batch_size=300,
    )
)


@pytest.mark.parametrize("module", [embedding, gemini, compatible])
def test_doctests(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]


def test_compatible_request_sends_float_encoding_and_dimensions() -> None:
    assert COMPATIBLE.request([EmbedText("x")], "document") == {
        "model": "m",
        "input": ["x"],
        "encoding_format": "float",
        "dimensions": 2,
    }


def test_gemini_batch_request_names_the_model_and_sends_titles_for_documents_only() -> None:
    documents = GEMINI_BATCH.request([EmbedText("a", "T"), EmbedText("b")], "document")
    queries = GEMINI_BATCH.request([EmbedText("q", "T")], "query")

    assert documents["requests"][0] == {
        "model": "models/e",
        "content": {"parts": [{"text": "a"}]},
        "taskType": "RETRIEVAL_DOCUMENT",
        "title": "T",
    }
    assert "title" not in documents["requests"][1]
    assert queries["requests"][0]["taskType"] == "RETRIEVAL_QUERY" and "title" not in queries["requests"][0]
    assert GEMINI_BATCH.request_size() == 100


@pytest.mark.parametrize("embedding", ["mpkZP83MTD8=", [0.6, 0.8]])
def test_base64_and_float_answers_decode_alike(embedding: object) -> None:
    matrix = checked_matrix(COMPATIBLE.vectors({"data": [{"index": 0, "embedding": embedding}]}, 1), 2)

    assert float(matrix[0] @ np.array([1, 0], dtype=np.float32)) == pytest.approx(0.6, abs=1e-6)


def test_data_is_placed_by_index() -> None:
    raw = COMPATIBLE.vectors({"data": [{"index": 1, "embedding": [0, 1]}, {"index": 0, "embedding": [1, 0]}]}, 2)

    assert raw == [[1, 0], [0, 1]]


@pytest.mark.parametrize(
    ("reply", "phrase"),
    [
        ({"data": [{"index": 0, "embedding": "mpkZP83MTA=="}]}, "7 bytes"),
        ({"data": [{"index": 0, "embedding": [0.1, 0.2, 0.3]}]}, "3 values, expected 2"),
        ({"data": [{"index": 0, "embedding": [1, 0]}, {"index": 0, "embedding": [1, 0]}]}, "unique indexes"),
        ({"data": []}, "0 vectors for 1 inputs"),
        ({"embeddings": []}, 'no "data" list'),
    ],
)
def test_bad_compatible_replies_are_invalid_vector(reply: object, phrase: str) -> None:
    with pytest.raises(MemoriesError) as caught:
        checked_matrix(COMPATIBLE.vectors(reply, 1), 2)

    assert caught.value.code == "invalid_vector" and phrase in caught.value.message


@pytest.mark.parametrize(
    ("vector", "phrase"),
    [
        ([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]], "nested"),
        ([], "empty"),
        ([0, 0, 0, 0], "all zeros"),
        ([1, float("nan"), 0, 0], "NaN"),
        ([1, True, 0, 0], "not numbers"),
    ],
)
def test_bad_vectors_are_refused(vector: object, phrase: str) -> None:
    with pytest.raises(MemoriesError) as caught:
        checked_matrix([vector], 4)

    assert caught.value.code == "invalid_vector" and phrase in caught.value.message


def test_a_vector_is_normalized() -> None:
    assert checked_matrix([[3, 0, 4, 0]], 4)[0].tolist() == pytest.approx([0.6, 0, 0.8, 0])


def test_a_server_that_ignores_dimensions_is_named_with_both_sizes() -> None:
    with pytest.raises(MemoriesError) as caught:
        checked_matrix([[0.01] * 1024], 256)

    assert "1024 values, expected 256" in caught.value.message and "ignore `dimensions`" in caught.value.message


def test_without_dimensions_the_first_vector_fixes_the_width() -> None:
    with pytest.raises(MemoriesError) as caught:
        checked_matrix([[1, 0, 0], [1, 0]], None)

    assert "2 values, expected 3" in caught.value.message


def test_gemini_replies() -> None:
    single = GeminiEmbedding(
        EmbeddingConfig(
            protocol="gemini", url="https://g.example/v1beta/models/e:embedContent", model="e", api_key_env="K"
        )
    )

    assert single.vectors({"embedding": {"values": [1, 0]}}, 1) == [[1, 0]]
    assert GEMINI_BATCH.vectors({"embeddings": [{"values": [1]}, {"values": [2]}]}, 2) == [[1], [2]]
    with pytest.raises(MemoriesError, match="1 embeddings for 2 inputs"):
        GEMINI_BATCH.vectors({"embeddings": [{"values": [1]}]}, 2)


def test_each_wire_format_keeps_its_vector_space_key_and_recipe() -> None:
    """The key binds protocol, URL, model, dimensions and the recipe; a change would re-embed every vault that uses
    the service, so the keys are pinned (computed before the providers package, issue 18 item 3)."""
    gemini_config = EmbeddingConfig(
        protocol="gemini",
        url="https://g.example/v1beta/models/e:batchEmbedContents",
        model="e",
        api_key_env="K",
        dimensions=256,
    )
    e5_config = EmbeddingConfig(
        protocol="compatible",
        url="http://127.0.0.1/v1/embeddings",
        model="e5",
        query_prefix="query: ",
        document_prefix="passage: ",
    )

    async def spaces() -> list[w.VectorSpace]:
        return [await RemoteBackend(config, HttpConfig(), None, 300).space() for config in (gemini_config, e5_config)]  # type: ignore[arg-type]

    gemini_space, e5_space = trio.run(spaces)

    assert gemini_space.key == "gemini:ab8764e5034ad259208e2e5867e7103798e15b5a58a18ccd3a3d6bc658449777"
    assert gemini_space.recipe == w.InputRecipe(title_field=True)
    assert e5_space.key == "compatible:282aa82e76f59a0e0f3c79faf1bdfd43773b508f0a74d7749e6cdf37db7ad366"
    assert e5_space.recipe == w.InputRecipe(prefix="passage: ")
    assert CompatibleEmbedding(e5_config).query_text("q") == "query: q"
    assert GeminiEmbedding(gemini_config).query_text("q") == "q"
