"""Remote embedding request bodies and reply checks (R-30, R-32), as plain functions; end to end in
``tests/e2e/test_remote.py``."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from memories.errors import MemoriesError
from memories.models import remote_embedding
from memories.models.remote_embedding import (
    EmbeddingService,
    EmbedText,
    checked_matrix,
    compatible_request,
    compatible_vectors,
    gemini_request,
    gemini_vectors,
)

COMPATIBLE = EmbeddingService("compatible", "http://127.0.0.1/v1/embeddings", "m", 2, None, 32)
GEMINI_BATCH = EmbeddingService("gemini", "https://g.example/v1beta/models/e:batchEmbedContents", "e", None, "K", 300)


def test_doctests() -> None:
    assert doctest.testmod(remote_embedding).failed == 0


def test_compatible_request_sends_float_encoding_and_dimensions() -> None:
    assert compatible_request(COMPATIBLE, [EmbedText("x")]) == {
        "model": "m",
        "input": ["x"],
        "encoding_format": "float",
        "dimensions": 2,
    }


def test_gemini_batch_request_names_the_model_and_sends_titles_for_documents_only() -> None:
    documents = gemini_request(GEMINI_BATCH, [EmbedText("a", "T"), EmbedText("b")], "document")
    queries = gemini_request(GEMINI_BATCH, [EmbedText("q", "T")], "query")

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
    matrix = checked_matrix(compatible_vectors({"data": [{"index": 0, "embedding": embedding}]}, 1), 2)

    assert float(matrix[0] @ np.array([1, 0], dtype=np.float32)) == pytest.approx(0.6, abs=1e-6)


def test_data_is_placed_by_index() -> None:
    raw = compatible_vectors({"data": [{"index": 1, "embedding": [0, 1]}, {"index": 0, "embedding": [1, 0]}]}, 2)

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
        checked_matrix(compatible_vectors(reply, 1), 2)

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
    single = EmbeddingService("gemini", "https://g.example/v1beta/models/e:embedContent", "e", None, "K", 32)

    assert gemini_vectors(single, {"embedding": {"values": [1, 0]}}, 1) == [[1, 0]]
    assert gemini_vectors(GEMINI_BATCH, {"embeddings": [{"values": [1]}, {"values": [2]}]}, 2) == [[1], [2]]
    with pytest.raises(MemoriesError, match="1 embeddings for 2 inputs"):
        gemini_vectors(GEMINI_BATCH, {"embeddings": [{"values": [1]}]}, 2)
