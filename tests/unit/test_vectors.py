"""The index worker's vector store: content addressing, cosine search, retention and the R-21 limit."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memories.errors import MemoriesError
from memories.limits import R21_MAX_VECTOR_BYTES as MAX_VECTOR_BYTES
from memories.models.embedding import DIMENSION
from memories.rag import vectors
from memories.rag.vectors import VectorStore, input_hash

SPACE = "local-onnx:" + "a" * 64
OTHER_SPACE = "local-onnx:" + "b" * 64


def _unit(rows: int, seed: int = 0, dimension: int = 768) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((rows, dimension)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _hashes(count: int, tag: str = "chunk") -> list[str]:
    return [input_hash(f"title: none | text: {tag} {index}") for index in range(count)]


def test_docstring_examples() -> None:
    assert doctest.testmod(vectors).failed == 0


def test_each_space_has_the_width_of_its_first_vectors() -> None:
    store = VectorStore()
    store.add(SPACE, _hashes(2), _unit(2))
    store.add(OTHER_SPACE, _hashes(2), _unit(2, dimension=4))

    assert (store.dimension(SPACE), store.dimension(OTHER_SPACE), store.dimension("none")) == (DIMENSION, 4, None)
    assert store.nbytes == 2 * 768 * 4 + 2 * 4 * 4
    assert store.search(OTHER_SPACE, _unit(1, dimension=4)[0], _hashes(2))


def test_input_hash_is_sha256_of_the_exact_utf8_input() -> None:
    assert input_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert input_hash("title: none | text: 筆記") != input_hash("title: none | text: 笔记")
    assert input_hash("title: a | text: b") != input_hash("title: a | text: b ")


def test_missing_add_and_search() -> None:
    store = VectorStore()
    hashes = _hashes(5)
    assert store.missing(SPACE, [*hashes, hashes[0]]) == hashes
    matrix = _unit(5)
    assert store.add(SPACE, hashes[:3], matrix[:3]) == 3
    assert store.missing(SPACE, hashes) == hashes[3:]
    assert store.add(SPACE, hashes, matrix) == 2
    assert store.missing(SPACE, hashes) == []
    assert len(store) == 5 and store.nbytes == 5 * 768 * 4

    results = store.search(SPACE, matrix[2], hashes)
    assert results[0][0] == hashes[2]
    assert results[0][1] == pytest.approx(1.0, abs=1e-5)
    expected = matrix @ matrix[2]
    assert [digest for digest, _ in results] == [hashes[i] for i in np.argsort(-expected, kind="stable")]
    for digest, score in results:
        assert score == pytest.approx(float(expected[hashes.index(digest)]), abs=1e-5)
    assert len(store.search(SPACE, matrix[2], hashes, limit=2)) == 2


def test_an_existing_key_keeps_its_vector() -> None:
    store = VectorStore()
    digest = _hashes(1)
    first, second = _unit(2)
    store.add(SPACE, digest, first[None, :])
    assert store.add(SPACE, digest, second[None, :]) == 0
    assert store.search(SPACE, first, digest)[0][1] == pytest.approx(1.0, abs=1e-5)


def test_search_covers_only_the_given_keys_of_the_given_space() -> None:
    store = VectorStore()
    hashes = _hashes(4)
    matrix = _unit(4)
    store.add(SPACE, hashes, matrix)
    store.add(OTHER_SPACE, hashes[:2], _unit(2, seed=1))
    assert [digest for digest, _ in store.search(SPACE, matrix[0], hashes[1:])] != []
    assert hashes[0] not in {digest for digest, _ in store.search(SPACE, matrix[0], hashes[1:])}
    assert {digest for digest, _ in store.search(OTHER_SPACE, matrix[0], hashes)} == set(hashes[:2])
    assert store.missing(OTHER_SPACE, hashes) == hashes[2:]
    assert store.search(SPACE, matrix[0], ["0" * 64]) == []


def test_retain_drops_keys_no_longer_used() -> None:
    store = VectorStore()
    hashes = _hashes(6)
    matrix = _unit(6)
    store.add(SPACE, hashes, matrix)
    store.add(OTHER_SPACE, hashes[:1], matrix[:1])
    keep = [(SPACE, hashes[1]), (SPACE, hashes[4])]
    assert store.retain(keep) == 5
    assert len(store) == 2 and store.nbytes == 2 * 768 * 4
    assert store.missing(SPACE, hashes) == [hashes[0], hashes[2], hashes[3], hashes[5]]
    assert store.missing(OTHER_SPACE, hashes[:1]) == hashes[:1]
    # The surviving rows still hold their own vectors after compaction.
    for index in (1, 4):
        assert store.search(SPACE, matrix[index], hashes)[0] == (hashes[index], pytest.approx(1.0, abs=1e-5))
    assert store.retain(keep) == 0


def test_clear_forgets_everything() -> None:
    store = VectorStore()
    store.add(SPACE, _hashes(3), _unit(3))
    store.clear()
    assert len(store) == 0 and store.nbytes == 0
    assert store.missing(SPACE, _hashes(3)) == _hashes(3)


@pytest.mark.parametrize(
    "poison",
    [float("nan"), float("inf"), 2.0],
    ids=["nan", "inf", "not-unit"],
)
def test_invalid_vectors_are_refused_and_nothing_is_stored(poison: float) -> None:
    store = VectorStore()
    matrix = _unit(3)
    matrix[1, 0] = poison
    with pytest.raises(MemoriesError) as caught:
        store.add(SPACE, _hashes(3), matrix)
    assert caught.value.code == "invalid_vector"
    assert len(store) == 0
    store.add(SPACE, _hashes(1), _unit(1))
    with pytest.raises(MemoriesError):
        store.search(SPACE, matrix[1], _hashes(3))


def test_wrong_shapes_are_caller_bugs() -> None:
    store = VectorStore()
    with pytest.raises(ValueError):
        store.add(SPACE, _hashes(2), _unit(3))
    store.add(SPACE, _hashes(1), _unit(1))
    with pytest.raises(ValueError):
        store.add(SPACE, _hashes(2), _unit(2, dimension=512))
    with pytest.raises(ValueError):
        store.search(SPACE, _unit(1, dimension=512)[0], _hashes(1))


def test_vault_limit_of_32_mib_leaves_the_store_unchanged() -> None:
    assert MAX_VECTOR_BYTES == 32 * 1024 * 1024
    capacity = MAX_VECTOR_BYTES // (768 * 4)  # 10,922 vectors
    store = VectorStore(max_bytes=MAX_VECTOR_BYTES)
    hashes = _hashes(capacity + 1)
    matrix = np.tile(_unit(1), (capacity + 1, 1))
    assert store.add(SPACE, hashes[:capacity], matrix[:capacity]) == capacity
    assert store.nbytes <= MAX_VECTOR_BYTES
    before = store.nbytes
    with pytest.raises(MemoriesError) as caught:
        store.add(SPACE, hashes[capacity - 1 :], matrix[capacity - 1 :])
    assert caught.value.code == "vault_too_large"
    assert "33,554,432 bytes (32 MiB)" in caught.value.message
    total = (capacity + 1) * 768 * 4
    assert caught.value.details == {
        "limit": "vector_bytes",
        "max": MAX_VECTOR_BYTES,
        "value": total,
        "setting": "rag.max_vector_bytes",
    }
    assert store.nbytes == before and store.missing(SPACE, hashes) == [hashes[capacity]]
    # Re-adding stored keys is free; room made by retain can be used again.
    assert store.add(SPACE, hashes[:10], matrix[:10]) == 0
    store.retain((SPACE, digest) for digest in hashes[1:capacity])
    assert store.add(SPACE, hashes[capacity:], matrix[capacity:]) == 1


@settings(max_examples=60, deadline=None)
@given(
    operations=st.lists(
        st.tuples(st.sampled_from(["add", "retain", "search"]), st.lists(st.integers(0, 11), max_size=8)),
        max_size=12,
    )
)
def test_store_matches_a_plain_dictionary(operations: list[tuple[str, list[int]]]) -> None:
    """Any sequence of adds, retains and searches agrees with a dict model of the store."""
    pool = _unit(12, dimension=8)
    hashes = _hashes(12)
    store = VectorStore()
    model: dict[str, np.ndarray] = {}
    for operation, picks in operations:
        chosen = [hashes[pick] for pick in picks]
        if operation == "add":
            new = {digest for digest in chosen if digest not in model}
            assert store.add(SPACE, chosen, pool[picks] if picks else np.empty((0, 8))) == len(new)
            for pick, digest in zip(picks, chosen, strict=True):
                model.setdefault(digest, pool[pick])
        elif operation == "retain":
            keep = set(chosen)
            assert store.retain((SPACE, digest) for digest in keep) == len(set(model) - keep)
            model = {digest: vector for digest, vector in model.items() if digest in keep}
        else:
            query = pool[picks[0]] if picks else pool[0]
            results = dict(store.search(SPACE, query, hashes))
            assert set(results) == set(model)
            for digest, score in results.items():
                assert score == pytest.approx(float(model[digest] @ query), abs=1e-5)
        assert len(store) == len(model)
        assert store.missing(SPACE, hashes) == [digest for digest in hashes if digest not in model]


def test_vectors_of_a_message_are_kept_without_a_copy_and_a_callers_array_is_copied() -> None:
    """Kept vectors loaded after an unlock (hundreds of MiB at 100,000 chunks, issue 28 item 4) arrive as read-only
    bytes of a worker message: the store's matrix is those bytes, not a copy of a copy. A writable array stays the
    caller's: changing it afterwards changes nothing stored."""
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((4, 8)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    message = np.frombuffer(matrix.tobytes(), dtype=np.float32).reshape(4, 8)
    keys = [input_hash(f"text {n}") for n in range(4)]
    store = VectorStore()
    store.add("s", keys, message)
    stored, _ = store.scanned("s", matrix[0])
    assert np.shares_memory(stored, message)

    mine = VectorStore()
    mine.add("s", keys, matrix)
    before = matrix.copy()
    matrix[:] = 0
    assert np.array_equal(mine.rows("s", keys), before)
    assert mine.search("s", before[2], keys)[0][0] == keys[2]
