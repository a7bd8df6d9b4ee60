"""Build a tiny stand-in for EmbeddingGemma 300M Q4 with the real model's interface and repository layout.

Usage::

    python ops/make_tiny_model.py OUT_DIR [--manifest PATH]

Writes, under ``OUT_DIR``, the files of ``onnx-community/embeddinggemma-300m-ONNX`` that Memories installs::

    onnx/model_q4.onnx         the graph; every weight lives in external data
    onnx/model_q4.onnx_data    the weights (external-data location ``model_q4.onnx_data``, beside the graph)
    tokenizer.json             byte-level BPE, 384 ids plus one added token at id 384 (outside the model vocabulary)
    tokenizer_config.json      Hugging Face tokenizer settings (BOS added, EOS not: the runtime adds EOS itself)
    config.json                ``vocab_size`` and ``hidden_size`` of the tiny model
    special_tokens_map.json

and, with ``--manifest``, a manifest in the format of ``memories/models/embeddinggemma.json`` (repository
``memories-tests/tiny-embeddinggemma``, a fixed fake revision, ``"test": true``) listing their sizes and SHA-256.

The graph has the real model's interface: inputs ``input_ids`` and ``attention_mask`` (int64 ``[batch, seq]``),
outputs ``last_hidden_state`` (float32 ``[batch, seq, 64]``) first and ``sentence_embedding`` (float32
``[batch, 768]``). It uses the real Q4 export's quantized contrib operators (com.microsoft): the token embedding
is a 4-bit ``GatherBlockQuantized`` lookup and the projection to 768 a 4-bit ``MatMulNBits`` (block size 32 for
both). Between them: masked mean pooling, so padding does not change a row, and texts that share tokens get
similar vectors (bag-of-tokens semantics); the output is L2-normalized in the graph, as the real one is.

Every byte is deterministic (fixed seed, fixed producer fields), so the manifest hashes are stable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

VOCAB_SIZE = 384
"""Rows of the token-embedding table (``config.json`` ``vocab_size``); ids ``>=`` this never reach the graph."""
HIDDEN_SIZE = 64
"""Width of ``last_hidden_state`` (``config.json`` ``hidden_size``); the real model's is 768."""
EMBEDDING_DIMENSION = 768
"""Width of ``sentence_embedding``, as EmbeddingGemma's (R-25)."""
BLOCK_SIZE = 32
"""Quantization block of both 4-bit weights (the real Q4 export uses 32 for MatMulNBits)."""
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
"""Ids 0, 1, 2, 3: the Gemma tokenizer's ids for these tokens."""
EXTRA_TOKEN = "<image_soft_token>"
"""An added token whose id (``VOCAB_SIZE``) lies outside the embedding table, like the real tokenizer's extras.

It is not marked special, so it is matched in note text even with ``encode_special_tokens`` on: that is what
lets a test show that ids outside the vocabulary never reach the graph.
"""
REPOSITORY = "memories-tests/tiny-embeddinggemma"
REVISION = "7e57000000000000000000000000000000000001"
"""A fixed fake revision (40 hex digits, as a Git commit)."""
GRAPH_PATH = "onnx/model_q4.onnx"
DATA_LOCATION = "model_q4.onnx_data"
_SEED = 20250904
_EXTERNAL_THRESHOLD = 1024
"""Tensors of at least this many bytes go to external data (the four weights); axes and epsilons stay inline,
because onnxruntime's shape inference reads them from the graph itself."""

# Words merged on top of the 256 bytes, in rank order: each word is built left to right (``Ġt``, ``Ġte``, ``Ġtex``,
# ``Ġtext``), so a word the list holds becomes one token. Byte-level BPE marks a leading space with "Ġ" (GPT-2's
# byte-to-unicode table). The list holds the prefix words of EmbeddingGemma's task prompts and common English.
# fmt: off
_WORDS = [
    "Ġthe", "Ġtext", "Ġtitle", "Ġquery", "Ġtask", "Ġsearch", "Ġresult", "Ġnone", "Ġand", "Ġof", "Ġto", "Ġin",
    "Ġis", "Ġfor", "Ġwith", "Ġon", "Ġa", "Ġby", "Ġcat", "Ġdog", "Ġmat", "Ġrust", "Ġgit", "Ġfile",
    "Ġcode", "Ġdata", "Ġnote", "Ġkey", "Ġuse", "Ġrun", "Ġcommand", "Ġline", "Ġmemory", "Ġvector",
]
_BIGRAMS = [
    "th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te", "of", "ed", "is",
    "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as", "ou", "io", "le", "ve", "co", "me",
]
# fmt: on


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte-to-character table, the one ``tokenizers``' ByteLevel pre-tokenizer uses."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def _vocabulary() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Ids 0-3 special tokens, 4-259 the 256 bytes in byte order, then merged words and bigrams.

    Returns ``(vocab, merges)`` for ``tokenizers.models.BPE``; the lists fill exactly ``VOCAB_SIZE`` ids.
    """
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for _byte, char in sorted(_bytes_to_unicode().items()):
        vocab[char] = len(vocab)
    merges: list[tuple[str, str]] = []
    for word in [*_WORDS, *_BIGRAMS]:
        for end in range(2, len(word) + 1):
            piece = word[:end]
            if piece not in vocab and len(vocab) < VOCAB_SIZE:
                merges.append((word[: end - 1], word[end - 1]))
                vocab[piece] = len(vocab)
    if len(vocab) != VOCAB_SIZE:
        raise AssertionError(f"the word lists fill {len(vocab)} ids, not {VOCAB_SIZE}")
    return vocab, merges


def build_tokenizer() -> Tokenizer:
    """The tiny byte-level BPE tokenizer: ``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3, BOS-only template."""
    vocab, merges = _vocabulary()
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 2)]
    )
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(EXTRA_TOKEN, special=False, normalized=False)])
    return tokenizer


def _quantize_4bit(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 4-bit block quantization along the last axis, packed two values per byte (low nibble first).

    ``weights`` float32 ``[rows, cols]`` with ``cols % BLOCK_SIZE == 0`` gives ``(packed uint8 [rows, cols / 2],
    scales float32 [rows, cols / BLOCK_SIZE])``. Values are stored with the default zero point 8 of
    MatMulNBits and GatherBlockQuantized (uint8 data without ``zero_points``): ``w = (q - 8) * scale``.
    """
    rows, cols = weights.shape
    blocks = weights.reshape(rows, cols // BLOCK_SIZE, BLOCK_SIZE)
    scales = np.abs(blocks).max(axis=2) / 7.0
    scales[scales == 0] = 1.0
    quantized = np.clip(np.rint(blocks / scales[:, :, None]) + 8, 0, 15).astype(np.uint8).reshape(rows, cols)
    packed = quantized[:, 0::2] | (quantized[:, 1::2] << 4)
    return packed, scales.astype(np.float32)


def _weights() -> dict[str, np.ndarray]:
    """Random token embeddings and projection (fixed seed), 4-bit quantized, keyed by initializer name.

    Single bytes count for less than merged pieces and whole words for more, so that texts sharing words (not
    just letters) get similar vectors; the special tokens get small vectors so that BOS and EOS barely move a
    row.
    """
    rng = np.random.default_rng(_SEED)
    vocab, _ = _vocabulary()
    embedding = rng.standard_normal((VOCAB_SIZE, HIDDEN_SIZE)).astype(np.float32)
    weight = np.ones(VOCAB_SIZE, dtype=np.float32)
    weight[: len(SPECIAL_TOKENS)] = 0.05
    weight[len(SPECIAL_TOKENS) : len(SPECIAL_TOKENS) + 256] = 0.3
    weight[[vocab[word] for word in _WORDS]] = 1.5
    embedding *= weight[:, None]
    projection = (rng.standard_normal((EMBEDDING_DIMENSION, HIDDEN_SIZE)) / np.sqrt(HIDDEN_SIZE)).astype(np.float32)
    embed_packed, embed_scales = _quantize_4bit(embedding)
    proj_packed, proj_scales = _quantize_4bit(projection)
    return {
        "embed_tokens.qweight": embed_packed,
        "embed_tokens.scales": embed_scales,
        "projection.qweight": proj_packed.reshape(EMBEDDING_DIMENSION, HIDDEN_SIZE // BLOCK_SIZE, BLOCK_SIZE // 2),
        "projection.scales": proj_scales,
    }


def build_graph() -> onnx.ModelProto:
    """The tiny graph (weights inline; :func:`write_model_files` moves them to external data)."""
    initializers = [onnx.numpy_helper.from_array(array, name) for name, array in _weights().items()]
    ms = "com.microsoft"
    nodes = [
        helper.make_node(
            "GatherBlockQuantized",
            ["embed_tokens.qweight", "input_ids", "embed_tokens.scales"],
            ["last_hidden_state"],
            domain=ms,
            gather_axis=0,
            quantize_axis=1,
            block_size=BLOCK_SIZE,
            bits=4,
            name="embed_tokens",
        ),
        helper.make_node("Cast", ["attention_mask"], ["mask_float"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_float", "mask_axis"], ["mask_3d"]),
        helper.make_node("Mul", ["last_hidden_state", "mask_3d"], ["masked_hidden"]),
        helper.make_node("ReduceSum", ["masked_hidden", "pool.axis"], ["hidden_sum"], keepdims=0),
        helper.make_node("ReduceSum", ["mask_3d", "pool.axis"], ["token_count"], keepdims=0),
        helper.make_node("Max", ["token_count", "pool.one"], ["token_count_safe"]),
        helper.make_node("Div", ["hidden_sum", "token_count_safe"], ["pooled"]),
        helper.make_node(
            "MatMulNBits",
            ["pooled", "projection.qweight", "projection.scales"],
            ["projected"],
            domain=ms,
            K=HIDDEN_SIZE,
            N=EMBEDDING_DIMENSION,
            bits=4,
            block_size=BLOCK_SIZE,
            name="projection",
        ),
        helper.make_node("ReduceL2", ["projected", "norm_axis"], ["norm"], keepdims=1),
        helper.make_node("Max", ["norm", "norm.epsilon"], ["norm_safe"]),
        helper.make_node("Div", ["projected", "norm_safe"], ["sentence_embedding"]),
    ]
    constants = [
        helper.make_tensor("mask_axis", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("pool.axis", TensorProto.INT64, [1], [1]),
        helper.make_tensor("pool.one", TensorProto.FLOAT, [1], [1.0]),
        helper.make_tensor("norm_axis", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("norm.epsilon", TensorProto.FLOAT, [1], [1e-12]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-embeddinggemma",
        inputs=[
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "sequence_length"]),
        ],
        outputs=[
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch_size", "sequence_length", HIDDEN_SIZE]
            ),
            helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch_size", EMBEDDING_DIMENSION]),
        ],
        initializer=initializers + constants,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(ms, 1)],
        producer_name="memories ops/make_tiny_model.py",
        producer_version="1",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _json_bytes(data: object) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


def write_model_files(out_dir: Path) -> list[str]:
    """Write the repository layout under ``out_dir`` (created if missing); return the relative paths written.

    The graph keeps its small constants inline and stores every weight in ``onnx/model_q4.onnx_data``.
    """
    (out_dir / "onnx").mkdir(parents=True, exist_ok=True)
    model = build_graph()
    onnx.external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location=DATA_LOCATION, size_threshold=_EXTERNAL_THRESHOLD
    )
    graph_file = out_dir / GRAPH_PATH
    data_file = graph_file.parent / DATA_LOCATION
    data_file.unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save_model(model, graph_file)
    tokenizer = build_tokenizer()
    (out_dir / "tokenizer.json").write_bytes(_json_bytes(json.loads(tokenizer.to_str())))
    specials = {
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
    }
    added = {
        str(index): {"content": token, "special": True, "lstrip": False, "rstrip": False, "normalized": False}
        for index, token in enumerate(SPECIAL_TOKENS)
    }
    added[str(VOCAB_SIZE)] = {
        "content": EXTRA_TOKEN,
        "special": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
    }
    tokenizer_config = {
        **specials,
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "model_max_length": 2048,
        "padding_side": "right",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (out_dir / "tokenizer_config.json").write_bytes(_json_bytes(tokenizer_config))
    config = {
        "_comment": "Tiny test stand-in for EmbeddingGemma 300M Q4, made by ops/make_tiny_model.py",
        "model_type": "tiny_embeddinggemma",
        "hidden_size": HIDDEN_SIZE,
        "vocab_size": VOCAB_SIZE,
        "embedding_dimension": EMBEDDING_DIMENSION,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
    }
    (out_dir / "config.json").write_bytes(_json_bytes(config))
    (out_dir / "special_tokens_map.json").write_bytes(_json_bytes(specials))
    return [
        GRAPH_PATH,
        f"onnx/{DATA_LOCATION}",
        "tokenizer.json",
        "tokenizer_config.json",
        "config.json",
        "special_tokens_map.json",
    ]


def manifest_bytes(out_dir: Path, paths: list[str]) -> bytes:
    """The test manifest for the files at ``paths`` under ``out_dir``, one file entry per line."""
    entries = []
    for path in paths:
        data = (out_dir / path).read_bytes()
        entry = {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        entries.append("    " + json.dumps(entry))
    header = {"repository": REPOSITORY, "revision": REVISION, "model_id": REPOSITORY, "graph": GRAPH_PATH}
    lines = ["{", *(f"  {json.dumps(key)}: {json.dumps(value)}," for key, value in header.items())]
    lines += ['  "files": [', ",\n".join(entries), "  ],", '  "test": true', "}", ""]
    return "\n".join(lines).encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    """The command line of the module docstring; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder to write the model repository layout into")
    parser.add_argument("--manifest", type=Path, help="also write a test manifest of the files to this path")
    args = parser.parse_args(argv)
    paths = write_model_files(args.out_dir)
    if args.manifest is not None:
        args.manifest.parent.mkdir(parents=True, exist_ok=True)
        args.manifest.write_bytes(manifest_bytes(args.out_dir, paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
