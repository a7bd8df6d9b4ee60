"""The in-process embedder on the tiny EmbeddingGemma stand-in (issue 4, acceptance 4, and the load checks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tokenizers import Tokenizer, processors

from memories.errors import MemoriesError
from memories.models.embedding import DIMENSION, document_input, query_input
from memories.models.local_onnx import BOS_ID, EOS_ID, UNK_ID, LocalOnnxEmbedder, release_free_heap
from memories.models.telemetry import disable_telemetry_environment
from tests.fixtures.tiny_model import REPO, TinyModel, model_variant

NOTE = "Rust ownership: each value has one owner, and the value is dropped when the owner goes out of scope."
LONG_NOTE = ("Git stores snapshots of the project; every commit points to a tree of files. " * 20)[:1500]


@pytest.fixture(scope="module")
def embedder(tiny_model: TinyModel) -> LocalOnnxEmbedder:
    return LocalOnnxEmbedder(tiny_model.model_dir, threads=1, max_tokens=2048, batch_size=8)


def _tokenizer(tiny_model: TinyModel) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model.model_dir / "tokenizer.json"))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- Acceptance 4 -------------------------------------------------------------------------------------------


def test_same_text_alone_and_beside_a_long_text_gives_the_same_vector(embedder: LocalOnnxEmbedder) -> None:
    text = document_input("Ownership", NOTE)
    long_text = document_input(None, LONG_NOTE)
    assert len(LONG_NOTE) == 1500
    alone = embedder.embed([text])[0]
    in_batch = embedder.embed([long_text, text])[1]
    one_run = embedder.embed_batch([text, long_text])[0]
    assert _cosine(alone, in_batch) >= 0.9999
    assert _cosine(alone, one_run) >= 0.9999


def test_text_over_max_tokens_is_truncated_and_keeps_eos_last(tiny_model: TinyModel) -> None:
    embedder = LocalOnnxEmbedder(tiny_model.model_dir, threads=1, max_tokens=32)
    text = document_input(None, LONG_NOTE)
    ids = embedder.token_ids(text)
    assert len(ids) == 32
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID
    assert ids.count(EOS_ID) == 1
    vectors = embedder.embed([text])
    assert vectors.shape == (1, 768)
    # Everything after the first 31 tokens is cut, so a longer tail changes nothing.
    longer = embedder.embed([text + " and much more text after the cut"])
    assert _cosine(vectors[0], longer[0]) >= 0.9999


def test_vectors_are_unit_float32_in_input_order(embedder: LocalOnnxEmbedder) -> None:
    inputs = [document_input(None, LONG_NOTE), query_input("rust"), document_input("t", ""), query_input(NOTE)]
    vectors = embedder.embed(inputs)
    assert vectors.dtype == np.float32 and vectors.shape == (4, 768)
    assert vectors.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    for row, text in enumerate(inputs):
        assert _cosine(vectors[row], embedder.embed([text])[0]) >= 0.9999


def test_batches_are_sorted_by_token_length(tiny_model: TinyModel) -> None:
    embedder = LocalOnnxEmbedder(tiny_model.model_dir, threads=1, batch_size=2)
    inputs = ["x " * 30, "x", "x " * 10, "x " * 5, "x " * 20]
    assert embedder.batches(inputs) == [[1, 3], [2, 4], [0]]
    assert embedder.embed([]).shape == (0, 768)


def test_query_prefix_is_fed_to_the_model(embedder: LocalOnnxEmbedder, tiny_model: TinyModel) -> None:
    ids = embedder.token_ids(query_input("rust ownership"))
    assert _tokenizer(tiny_model).decode(ids[1:-1]) == "task: search result | query: rust ownership"
    assert (
        embedder.embed_queries(["rust ownership"]).tobytes()
        == embedder.embed([query_input("rust ownership")]).tobytes()
    )


def test_document_prefix_is_fed_to_the_model(embedder: LocalOnnxEmbedder, tiny_model: TinyModel) -> None:
    tokenizer = _tokenizer(tiny_model)
    assert tokenizer.decode(embedder.token_ids(document_input("Git", "commits"))[1:-1]) == (
        "title: Git | text: commits"
    )
    assert tokenizer.decode(embedder.token_ids(document_input(None, "commits"))[1:-1]) == (
        "title: none | text: commits"
    )
    assert tokenizer.decode(embedder.token_ids(document_input("", "commits"))[1:-1]) == ("title: none | text: commits")
    assert embedder.document_input("Git", "commits") == document_input("Git", "commits")
    vectors = embedder.embed([document_input("Git", "commits")])
    assert vectors.shape == (1, DIMENSION) == (1, embedder.dimension)
    assert not np.array_equal(vectors, embedder.embed(["commits"]))


def test_token_ids_are_what_the_graph_receives(embedder: LocalOnnxEmbedder, tiny_model: TinyModel) -> None:
    disable_telemetry_environment()
    import onnxruntime

    text = query_input("git commit")
    ids = np.array([embedder.token_ids(text)], dtype=np.int64)
    session = onnxruntime.InferenceSession(str(tiny_model.model_dir / "onnx/model_q4.onnx"))
    (bare,) = session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    assert _cosine(bare[0], embedder.embed([text])[0]) >= 0.99999


# --- BOS / EOS and special tokens ----------------------------------------------------------------------------


def test_bos_first_eos_last_when_the_tokenizer_adds_bos_only(
    embedder: LocalOnnxEmbedder, tiny_model: TinyModel
) -> None:
    raw = _tokenizer(tiny_model).encode("hello").ids
    assert raw[0] == BOS_ID and raw[-1] != EOS_ID  # the tiny tokenizer leaves EOS to the runtime
    ids = embedder.token_ids("hello")
    assert ids == [*raw, EOS_ID]
    assert embedder.token_ids("") == [BOS_ID, EOS_ID]


@pytest.mark.parametrize(
    "post_processor",
    [
        None,
        processors.TemplateProcessing(
            single="<bos> $A <eos>", pair="<bos> $A $B <eos>", special_tokens=[("<bos>", 2), ("<eos>", 1)]
        ),
    ],
    ids=["adds-nothing", "adds-bos-and-eos"],
)
def test_bos_and_eos_are_added_once_whatever_the_tokenizer_adds(
    tiny_model: TinyModel, tmp_path: Path, post_processor: processors.PostProcessor | None
) -> None:
    model_dir = model_variant(tiny_model, tmp_path / "model")
    tokenizer = _tokenizer(tiny_model)
    tokenizer.post_processor = post_processor
    tokenizer.save(str(model_dir / "tokenizer.json"))
    embedder = LocalOnnxEmbedder(model_dir, threads=1, max_tokens=8)
    reference = LocalOnnxEmbedder(tiny_model.model_dir, threads=1, max_tokens=8)
    for text in ["hello", "", LONG_NOTE]:
        ids = embedder.token_ids(text)
        assert ids == reference.token_ids(text)
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID
        assert ids.count(BOS_ID) == 1 and ids.count(EOS_ID) == 1


def test_literal_special_token_text_is_not_the_special_id(embedder: LocalOnnxEmbedder) -> None:
    ids = embedder.token_ids("end of note <eos> and <bos> and <pad> more")
    assert ids.count(EOS_ID) == 1 and ids[-1] == EOS_ID
    assert ids.count(BOS_ID) == 1 and ids[0] == BOS_ID
    assert 0 not in ids


def test_ids_outside_the_vocabulary_never_reach_the_graph(embedder: LocalOnnxEmbedder, tiny_model: TinyModel) -> None:
    text = f"see {tiny_model.extra_token} here"
    raw = _tokenizer(tiny_model)
    raw.encode_special_tokens = True
    assert tiny_model.vocab_size in raw.encode(text).ids  # the tokenizer does produce the out-of-range id
    ids = embedder.token_ids(text)
    assert max(ids) < tiny_model.vocab_size
    assert UNK_ID in ids
    assert np.isfinite(embedder.embed([text])).all()


# --- Load checks -----------------------------------------------------------------------------------------------


def _append_after_output(model: onnx.ModelProto, make_nodes: Callable[[str], list[onnx.NodeProto]]) -> None:
    """Rename the node output ``sentence_embedding`` to ``raw_embedding`` and add ``make_nodes(raw)`` after it."""
    for node in model.graph.node:
        node.output[:] = ["raw_embedding" if name == "sentence_embedding" else name for name in node.output]
    model.graph.node.extend(make_nodes("raw_embedding"))


def _rename_output(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        node.output[:] = ["embedding" if name == "sentence_embedding" else name for name in node.output]
    model.graph.output[1].name = "embedding"


def _int32_input_ids(model: onnx.ModelProto) -> None:
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32


def _float16_output(model: onnx.ModelProto) -> None:
    _append_after_output(
        model, lambda source: [helper.make_node("Cast", [source], ["sentence_embedding"], to=TensorProto.FLOAT16)]
    )
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.FLOAT16


def _wrong_width(model: onnx.ModelProto) -> None:
    model.graph.initializer.extend(
        [
            helper.make_tensor("slice_starts", TensorProto.INT64, [1], [0]),
            helper.make_tensor("slice_ends", TensorProto.INT64, [1], [512]),
            helper.make_tensor("slice_axes", TensorProto.INT64, [1], [1]),
        ]
    )
    _append_after_output(
        model,
        lambda source: [
            helper.make_node("Slice", [source, "slice_starts", "slice_ends", "slice_axes"], ["sentence_embedding"])
        ],
    )
    model.graph.output[1].type.tensor_type.shape.dim[1].dim_value = 512


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (_rename_output, "sentence_embedding"),
        (_int32_input_ids, "int64"),
        (_float16_output, "float32"),
        (_wrong_width, "768"),
    ],
    ids=["output-renamed", "input-int32", "output-float16", "output-512-wide"],
)
def test_graph_interface_is_checked_at_load(
    tiny_model: TinyModel, tmp_path: Path, edit: Callable[[onnx.ModelProto], None], named: str
) -> None:
    model_dir = model_variant(tiny_model, tmp_path / "model", edit)
    with pytest.raises(MemoriesError) as caught:
        LocalOnnxEmbedder(model_dir, threads=1)
    assert caught.value.code == "model_invalid"
    assert named in caught.value.message


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ("onnx/model_q4.onnx_data", "model_q4.onnx_data"),
        ("tokenizer.json", "tokenizer.json"),
        ("config.json", "config.json"),
    ],
)
def test_missing_files_are_model_invalid(tiny_model: TinyModel, tmp_path: Path, missing: str, named: str) -> None:
    model_dir = model_variant(tiny_model, tmp_path / "model")
    (model_dir / missing).unlink()
    with pytest.raises(MemoriesError) as caught:
        LocalOnnxEmbedder(model_dir, threads=1)
    assert caught.value.code == "model_invalid"
    assert named in caught.value.message


def test_truncated_external_data_is_model_invalid(tiny_model: TinyModel, tmp_path: Path) -> None:
    model_dir = model_variant(tiny_model, tmp_path / "model")
    data = model_dir / "onnx/model_q4.onnx_data"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(MemoriesError) as caught:
        LocalOnnxEmbedder(model_dir, threads=1)
    assert caught.value.code == "model_invalid"


@pytest.mark.parametrize(
    ("config", "named"),
    [({"hidden_size": 64}, "vocab_size"), ({"vocab_size": "many"}, "vocab_size")],
    ids=["no-vocab-size", "vocab-size-not-a-number"],
)
def test_config_without_a_vocabulary_size_is_model_invalid(
    tiny_model: TinyModel, tmp_path: Path, config: dict[str, object], named: str
) -> None:
    model_dir = model_variant(tiny_model, tmp_path / "model")
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(MemoriesError) as caught:
        LocalOnnxEmbedder(model_dir, threads=1)
    assert caught.value.code == "model_invalid"
    assert named in caught.value.message


def test_tokenizer_with_other_special_ids_is_model_invalid(tiny_model: TinyModel, tmp_path: Path) -> None:
    model_dir = model_variant(tiny_model, tmp_path / "model")
    data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    vocab["<bos>"], vocab["<eos>"] = vocab["<eos>"], vocab["<bos>"]
    for added in data["added_tokens"]:
        added["id"] = {1: 2, 2: 1}.get(added["id"], added["id"])
    (model_dir / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(MemoriesError) as caught:
        LocalOnnxEmbedder(model_dir, threads=1)
    assert caught.value.code == "model_invalid"
    assert "<eos>" in caught.value.message or "<bos>" in caught.value.message


# --- Invalid vectors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_nan_or_infinite_output_is_invalid_vector(tiny_model: TinyModel, tmp_path: Path, value: float) -> None:
    def poison(model: onnx.ModelProto) -> None:
        model.graph.initializer.append(helper.make_tensor("poison", TensorProto.FLOAT, [1], [value]))
        _append_after_output(
            model, lambda source: [helper.make_node("Mul", [source, "poison"], ["sentence_embedding"])]
        )

    embedder = LocalOnnxEmbedder(model_variant(tiny_model, tmp_path / "model", poison), threads=1)
    with pytest.raises(MemoriesError) as caught:
        embedder.embed([query_input("anything")])
    assert caught.value.code == "invalid_vector"
    with pytest.raises(MemoriesError):
        embedder.embed_batch([query_input("anything")])


# --- Vector space key ----------------------------------------------------------------------------------------


def test_space_key_follows_the_files(tiny_model: TinyModel, tmp_path: Path) -> None:
    base = LocalOnnxEmbedder(tiny_model.model_dir, threads=1)
    again = LocalOnnxEmbedder(model_variant(tiny_model, tmp_path / "copy"), threads=1)
    assert base.space_key == again.space_key
    assert base.space_key.startswith("local-onnx:")

    tokenizer_changed = model_variant(tiny_model, tmp_path / "tokenizer")
    path = tokenizer_changed / "tokenizer.json"
    path.write_text(json.dumps(json.loads(path.read_text(encoding="utf-8"))), encoding="utf-8")
    assert LocalOnnxEmbedder(tokenizer_changed, threads=1).space_key != base.space_key

    def new_producer(model: onnx.ModelProto) -> None:
        model.producer_version = "2"

    graph_changed = model_variant(tiny_model, tmp_path / "graph", new_producer)
    assert LocalOnnxEmbedder(graph_changed, threads=1).space_key != base.space_key

    data_changed = model_variant(tiny_model, tmp_path / "data")
    data = bytearray((data_changed / "onnx/model_q4.onnx_data").read_bytes())
    data[0] ^= 0x01
    (data_changed / "onnx/model_q4.onnx_data").write_bytes(bytes(data))
    assert LocalOnnxEmbedder(data_changed, threads=1).space_key != base.space_key

    assert LocalOnnxEmbedder(tiny_model.model_dir, threads=1, max_tokens=64).space_key != base.space_key
    # Threads and batch size change how fast, not what: same space.
    assert LocalOnnxEmbedder(tiny_model.model_dir, threads=2, batch_size=3).space_key == base.space_key


def test_manifest_hashes_and_identity_go_into_the_space_key(tiny_model: TinyModel) -> None:
    hashed = LocalOnnxEmbedder(tiny_model.model_dir, threads=1)
    pinned = LocalOnnxEmbedder(tiny_model.model_dir, threads=1, manifest=tiny_model.manifest)
    manifest_hashes = {file.path: file.sha256 for file in tiny_model.manifest.files}
    assert hashed.files == {path: manifest_hashes[path] for path in hashed.files}
    assert set(hashed.files) == {"onnx/model_q4.onnx", "onnx/model_q4.onnx_data", "tokenizer.json"}
    assert pinned.files == hashed.files
    assert pinned.space_key != hashed.space_key  # repository, revision and model id are bound in too


# --- Runtime settings ------------------------------------------------------------------------------------------


def test_threads_stay_within_the_cores_and_only_an_explicit_excess_warns(tiny_model: TinyModel) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    default = LocalOnnxEmbedder(tiny_model.model_dir)  # local_threads not set: 4, or fewer on a smaller machine
    assert default.threads == min(4, cores) and not any("exceeds" in warning for warning in default.warnings)
    within = LocalOnnxEmbedder(tiny_model.model_dir, threads=cores)
    assert within.threads == cores and not any("exceeds" in warning for warning in within.warnings)
    beyond = LocalOnnxEmbedder(tiny_model.model_dir, threads=cores + 1)
    assert beyond.threads == cores
    assert any(f"local_threads = {cores + 1} exceeds the {cores}" in warning for warning in beyond.warnings)
    assert np.isfinite(beyond.embed([query_input("still works")])).all()


def test_telemetry_leaves_no_device_id_or_event_store(tiny_model: TinyModel, tmp_path: Path) -> None:
    """A fresh process that loads and runs the model writes nothing under its cache folder.

    Without ``ORT_DISABLE_TELEMETRY=1`` set before the import, onnxruntime 1.32 writes a device id and an
    offline event store under ``$XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime`` and looks up its
    collector's host name. The child sets nothing itself: the module must do it.
    """
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from memories.models.embedding import query_input\nfrom memories.models.local_onnx import LocalOnnxEmbedder\n"
        "embedder = LocalOnnxEmbedder(Path(sys.argv[1]), threads=1)\n"
        "embedder.embed([query_input('hello')])\n"
        "assert not embedder.warnings, embedder.warnings\n"
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ORT_") and key not in {"HOME", "XDG_CACHE_HOME"}
    }
    environment |= {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script, str(tiny_model.model_dir)], check=True, env=environment, cwd=tmp_path)
    assert list(cache.rglob("*")) == []
    assert not (tmp_path / ".cache").exists()


def test_every_graph_run_lets_the_arena_shrink(embedder: LocalOnnxEmbedder) -> None:
    """The run options the embedder passes to every run give back what the CPU arena grew by (memory, issue 11);
    the heap trim after it is a no-op or glibc's ``malloc_trim``, and embedding still works after either."""
    assert embedder._run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    release_free_heap()
    assert embedder.embed([document_input(None, NOTE)]).shape == (1, DIMENSION)
