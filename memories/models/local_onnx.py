"""In-process embeddings: EmbeddingGemma 300M Q4 on ONNX Runtime (R-22, R-24, R-25), behind one backend interface.

The pipeline for one text, as the embedding worker runs it::

    prefix (query_input / document_input)  ->  tokenizer.json (tokenizers, special-token text kept as text)
      ->  [BOS] ids... [EOS], truncated to max_tokens, ids >= vocab_size -> <unk>
      ->  batches sorted by token length, padded right with 0  ->  graph output "sentence_embedding"
      ->  checked finite, L2-normalized float32[n, 768]

**Telemetry.** The onnxruntime wheels since 1.29 carry Microsoft's 1DS telemetry on Linux and macOS as well as
Windows (``onnxruntime/Privacy.md`` in the installed package). The installed 1.32 reads one environment opt-out,
``ORT_DISABLE_TELEMETRY=1``; it is latched when onnxruntime is imported, and with it no uploader, event, device id
(``$XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime/deviceid``) or offline event store (``onnxruntime.db``
beside it) is created. Without it, even with ``disable_telemetry_events()`` called first thing, a process that
runs a session writes both files and resolves ``mobile.events.data.microsoft.com``; set after the import, the
variable is too late and the files still appear. So:

- the supervisor starts ``workers.embedding`` with :data:`TELEMETRY_ENVIRONMENT` merged into its environment, and
  the worker calls :func:`disable_telemetry_environment` first thing, before anything imports onnxruntime;
- this module never imports onnxruntime at import time; it imports it on first use, after setting the variable
  itself, and calls ``onnxruntime.disable_telemetry_events()`` (the runtime API, which suppresses non-essential
  events) before creating any session;
- if onnxruntime was already imported without the opt-out, :attr:`LocalOnnxEmbedder.warnings` says so.

**Vector space key.** A digest of the backend name, the model's repository, revision and id (when it came from a
manifest), the dimension, ``max_tokens``, both task prefixes and the SHA-256 of the graph, its external data and
``tokenizer.json``, so vectors from different files, prefixes or truncation never meet in one search (R-32).

**Memory** (issue 11; measured with the real Q4 model, 2 threads, batches of 8 corpus chunks of up to 768 code
points, ``ops/bench/embed.py``). What the embedding worker holds, and what it no longer keeps:

- the graph's weights (``model_q4.onnx_data``, 184 MiB), which ONNX Runtime maps from the file: clean pages
  shared with the page cache;
- the tokenizer (``tokenizer.json``, 262,145 tokens): about 100 MiB once built, but parsing the 32 MiB JSON
  leaves about 190 MiB more on the C heap, freed yet kept by glibc's allocator;
- ONNX Runtime's CPU arena: it grows to the activations of the largest batch seen (about 320 MiB for 8 chunks of
  700-odd tokens) and never shrinks on its own.

So each run asks the arena to give back what it grew by (the run option
``memory.enable_memory_arena_shrinkage = cpu:0``), and after loading and after each run the C heap's free pages go
back to the OS (glibc ``malloc_trim(0)``; elsewhere nothing is done). Measured in one process after 10 batches:
resident 614 MiB before, 359 MiB after; peak 614 MiB before, 525 MiB after. Turning the arena off instead
(``enable_cpu_mem_arena = False``) ends at the same 360 MiB but peaks at 1.2-1.4 GiB (every tensor is a fresh
allocation), and ``enable_mem_pattern = False`` changes nothing measurable.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from tokenizers import Tokenizer

from memories.config import DEFAULT_LOCAL_THREADS
from memories.errors import MemoriesError
from memories.models.embedding import (
    DIMENSION,
    DOCUMENT_PREFIX,
    QUERY_PREFIX,
    Embedder,
    FloatMatrix,
    document_input,
    query_input,
    vector_space_key,
)
from memories.models.manifest import Manifest
from memories.models.telemetry import TELEMETRY_ENVIRONMENT, disable_telemetry_environment

if TYPE_CHECKING:
    import onnxruntime

ARENA_SHRINKAGE = {"memory.enable_memory_arena_shrinkage": "cpu:0"}
"""Run options of every graph run: the CPU arena frees what it grew by during the run (see "Memory" above)."""
BACKEND = "local-onnx"
"""Backend name bound into the vector space key."""
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
"""Gemma tokenizer ids of ``<pad>``, ``<eos>``, ``<bos>``, ``<unk>``; checked against ``tokenizer.json`` at load."""
GRAPH_PATH = "onnx/model_q4.onnx"
"""The Q4 graph inside a model folder (the repository layout); its external data is ``<graph>_data`` beside it."""
TOKENIZER_PATH = "tokenizer.json"
CONFIG_PATH = "config.json"

_SPECIAL_IDS = {"<pad>": PAD_ID, "<eos>": EOS_ID, "<bos>": BOS_ID, "<unk>": UNK_ID}
_ORT_IMPORTED_WITHOUT_OPT_OUT = "onnxruntime" in sys.modules and not all(
    os.environ.get(name) == value for name, value in TELEMETRY_ENVIRONMENT.items()
)


class LocalOnnxEmbedder(Embedder):
    """EmbeddingGemma (or a stand-in with its interface) loaded from a model folder, run in this process.

    Args:
        model_dir: folder in the repository layout: ``onnx/model_q4.onnx`` (or ``manifest.graph``) with its
            external data ``onnx/model_q4.onnx_data`` beside it, ``tokenizer.json``, ``config.json``.
        threads: ONNX Runtime intra-op threads (``[rag] local_threads``; ``None``:
            :data:`~memories.config.DEFAULT_LOCAL_THREADS`); never more than the cores this process may use
            (:attr:`threads` is what runs), and an explicit value above them is capped with a warning. Inter-op
            is 1, spinning off.
        max_tokens: longest token sequence fed to the graph, BOS and EOS included (``[rag] max_tokens``).
        batch_size: texts per graph run (``[rag] embed_batch_size``).
        manifest: the manifest the folder was installed and verified from; its hashes, repository, revision and
            model id go into the space key instead of hashing the files again. ``None`` for a user-supplied
            ``local_model_dir``: the files are hashed at load (about a second for the 200 MB model).

    Raises:
        MemoriesError: ``model_invalid`` naming the problem when a file is missing, ``config.json`` or
            ``tokenizer.json`` does not load, the special-token ids differ from Gemma's, the graph lacks the
            int64 rank-2 inputs ``input_ids`` and ``attention_mask`` or the float32 ``[batch, 768]`` output
            ``sentence_embedding``, or ONNX Runtime refuses the graph.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int | None = None,
        max_tokens: int = 2048,
        batch_size: int = 8,
        manifest: Manifest | None = None,
    ) -> None:
        if (threads is not None and threads < 1) or max_tokens < 2 or batch_size < 1:
            raise ValueError("threads and batch_size must be >= 1, max_tokens >= 2")
        self.model_dir = Path(model_dir)
        self.requested_threads = threads
        self.threads = min(DEFAULT_LOCAL_THREADS if threads is None else threads, _available_cores())
        """Intra-op threads the session runs with."""
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.warnings: list[str] = []
        """Things a person should know but that do not stop the model from running (shown in status/logs)."""
        graph = manifest.graph if manifest is not None else GRAPH_PATH
        self._paths = {
            "graph": graph,
            "external_data": f"{graph}_data",
            "tokenizer": TOKENIZER_PATH,
        }
        for role, relative in [*self._paths.items(), ("config", CONFIG_PATH)]:
            path = self.model_dir / relative
            if not path.is_file():
                hint = " (it must sit beside the graph)" if role == "external_data" else ""
                raise MemoriesError("model_invalid", f"{path} is missing{hint}", {"file": relative})
        self.vocab_size = self._read_vocab_size()
        self._tokenizer = self._load_tokenizer()
        release_free_heap()  # the tokenizer's JSON parse left ~190 MiB of freed heap behind
        self._session = self._load_session()
        self._run_options = _run_options()
        release_free_heap()
        self.files = self._file_digests(manifest)
        """Relative path -> SHA-256 hex of the graph, its external data and ``tokenizer.json``."""
        description: dict[str, Any] = {
            "backend": BACKEND,
            "dimension": DIMENSION,
            "max_tokens": max_tokens,
            "query_prefix": QUERY_PREFIX,
            "document_prefix": DOCUMENT_PREFIX,
            "files": self.files,
        }
        if manifest is not None:
            description |= {
                "repository": manifest.repository,
                "revision": manifest.revision,
                "model_id": manifest.model_id,
            }
        self._space_key = vector_space_key(description)

    @property
    def space_key(self) -> str:
        """``"local-onnx:<sha256 hex>"``, see the module docstring for what it covers."""
        return self._space_key

    @property
    def dimension(self) -> int:
        """Always 768 (:data:`DIMENSION`)."""
        return DIMENSION

    def query_input(self, query: str) -> str:
        """See :func:`query_input`."""
        return query_input(query)

    def document_input(self, title: str | None, text: str) -> str:
        """See :func:`document_input`."""
        return document_input(title, text)

    def token_ids(self, text: str) -> list[int]:
        """The token ids fed to the graph for ``text`` (a full model input, prefix included), before padding.

        Starts with BOS (2) and ends with EOS (1), adding what the tokenizer left out; at most ``max_tokens``
        ids, the last always EOS; ids ``>= vocab_size`` (``config.json``) replaced by ``<unk>`` (3). Literal
        special-token text in ``text`` (``"<eos>"``) is tokenized as text, never as the special id.
        """
        ids = self._tokenizer.encode(text).ids
        if not ids or ids[0] != BOS_ID:
            ids.insert(0, BOS_ID)
        if len(ids) > 1 and ids[-1] == EOS_ID:
            ids.pop()
        ids = ids[: self.max_tokens - 1]
        ids.append(EOS_ID)
        vocab_size = self.vocab_size
        if max(ids) >= vocab_size:
            ids = [UNK_ID if token >= vocab_size else token for token in ids]
        return ids

    def batches(self, inputs: Sequence[str]) -> list[list[int]]:
        """Positions of ``inputs`` grouped into graph runs of at most ``batch_size``, sorted by token length.

        This is the plan :meth:`embed` follows: texts of similar length share a batch, so little padding is
        computed (ties keep input order). Only the benchmark (``ops/bench/embed.py`` feeds a bare ONNX Runtime
        session the same batches) and tests call it. The daemon never does: per step it sends the embedding
        worker one request of at most ``embed_batch_size`` inputs, and the worker calls :meth:`embed`.
        """
        lengths = [len(self.token_ids(text)) for text in inputs]
        return self._plan(lengths)

    def embed_batch(self, inputs: Sequence[str]) -> FloatMatrix:
        """One graph run over ``inputs`` as given: float32 ``[len(inputs), 768]``, L2-normalized, in input order.

        No sorting and no splitting at ``batch_size``. Only the benchmark (``ops/bench/embed.py`` measures the
        padding cost of unsorted batches with it) and tests call it; the product calls :meth:`embed`.

        Raises:
            MemoriesError: ``invalid_vector`` or ``model_invalid`` as :meth:`embed`.
        """
        return self._run([self.token_ids(text) for text in inputs])

    def embed(self, inputs: Sequence[str]) -> FloatMatrix:
        """All of ``inputs`` in length-sorted batches: float32 ``[len(inputs), 768]`` in input order.

        Raises:
            MemoriesError: ``invalid_vector`` when a row is NaN, infinite or zero; ``model_invalid`` when the
                graph's output does not have the shape it declared.
        """
        encoded = [self.token_ids(text) for text in inputs]
        result = np.empty((len(encoded), DIMENSION), dtype=np.float32)
        for positions in self._plan([len(ids) for ids in encoded]):
            result[positions] = self._run([encoded[position] for position in positions])
        return result

    def _plan(self, lengths: list[int]) -> list[list[int]]:
        order = sorted(range(len(lengths)), key=lambda position: lengths[position])
        return [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]

    def _run(self, encoded: list[list[int]]) -> FloatMatrix:
        if not encoded:
            return np.empty((0, DIMENSION), dtype=np.float32)
        width = max(len(ids) for ids in encoded)
        input_ids = np.full((len(encoded), width), PAD_ID, dtype=np.int64)
        attention_mask = np.zeros((len(encoded), width), dtype=np.int64)
        for row, ids in enumerate(encoded):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
        (output,) = self._session.run(
            ["sentence_embedding"], {"input_ids": input_ids, "attention_mask": attention_mask}, self._run_options
        )
        release_free_heap()  # what the arena gave back, and the feeds
        if output.shape != (len(encoded), DIMENSION):
            raise MemoriesError(
                "model_invalid",
                f"sentence_embedding came out with shape {list(output.shape)}, not [{len(encoded)}, {DIMENSION}]",
            )
        return _normalized(output)

    def _read_vocab_size(self) -> int:
        path = self.model_dir / CONFIG_PATH
        try:
            vocab_size = json.loads(path.read_text(encoding="utf-8"))["vocab_size"]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise MemoriesError("model_invalid", f"{path} has no readable vocab_size ({exc})") from None
        if not isinstance(vocab_size, int) or vocab_size <= max(_SPECIAL_IDS.values()):
            raise MemoriesError("model_invalid", f"{path}: vocab_size {vocab_size!r} is not a usable size")
        return vocab_size

    def _load_tokenizer(self) -> Tokenizer:
        path = self.model_dir / TOKENIZER_PATH
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for malformed files
            raise MemoriesError("model_invalid", f"{path} does not load: {exc}") from None
        for token, expected in _SPECIAL_IDS.items():
            found = tokenizer.token_to_id(token)
            if found != expected:
                raise MemoriesError("model_invalid", f"{path}: {token} has id {found}, expected {expected}")
        tokenizer.no_truncation()
        tokenizer.no_padding()
        # Note text that spells a special token ("<eos>") must stay text, never become the control id.
        tokenizer.encode_special_tokens = True
        return tokenizer

    def _load_session(self) -> onnxruntime.InferenceSession:
        ort = _import_onnxruntime()
        if _ORT_IMPORTED_WITHOUT_OPT_OUT:
            self.warnings.append(
                "onnxruntime was imported before ORT_DISABLE_TELEMETRY=1 was set; only the runtime "
                "telemetry switch applies in this process"
            )
        if self.requested_threads is not None and self.requested_threads > self.threads:
            self.warnings.append(
                f"local_threads = {self.requested_threads} exceeds the {self.threads} CPU cores available; "
                f"using {self.threads}"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: the worker's log is not the place for optimizer chatter
        path = self.model_dir / self._paths["graph"]
        try:
            session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own pybind exception types
            raise MemoriesError("model_invalid", f"ONNX Runtime cannot load {path}: {exc}") from None
        _check_interface(session, path)
        return session

    def _file_digests(self, manifest: Manifest | None) -> dict[str, str]:
        pinned = {file.path: file.sha256 for file in manifest.files} if manifest is not None else {}
        digests = {}
        for relative in self._paths.values():
            if relative in pinned:
                digests[relative] = pinned[relative]
            else:
                with open(self.model_dir / relative, "rb") as file:
                    digests[relative] = hashlib.file_digest(file, "sha256").hexdigest()
        return digests


def _import_onnxruntime() -> Any:
    """onnxruntime, imported after the environment opt-out and with the runtime telemetry switch off."""
    disable_telemetry_environment()
    import onnxruntime

    onnxruntime.disable_telemetry_events()
    return onnxruntime


def _run_options() -> onnxruntime.RunOptions:
    options = _import_onnxruntime().RunOptions()
    for key, value in ARENA_SHRINKAGE.items():
        options.add_run_config_entry(key, value)
    return options


def release_free_heap() -> None:
    """Return the C heap's free pages to the OS: glibc's ``malloc_trim(0)``; a no-op where libc has no such call
    (macOS, musl). Costs well under a millisecond at the embedding worker's heap size."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except AttributeError:  # not glibc
        return None


def _available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else ``os.cpu_count()``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _check_interface(session: onnxruntime.InferenceSession, path: Path) -> None:
    """The load checks of issue 4 on the graph's declared inputs and outputs (``model_invalid`` otherwise)."""
    inputs = {node.name: node for node in session.get_inputs()}
    for name in ("input_ids", "attention_mask"):
        node = inputs.pop(name, None)
        if node is None:
            raise MemoriesError("model_invalid", f"{path} has no input {name!r}")
        if node.type != "tensor(int64)" or len(node.shape) != 2:
            raise MemoriesError(
                "model_invalid", f"{path}: input {name!r} is {node.type} {node.shape}, not int64 [batch, seq]"
            )
    if inputs:
        raise MemoriesError("model_invalid", f"{path} needs inputs this runtime does not feed: {sorted(inputs)}")
    outputs = {node.name: node for node in session.get_outputs()}
    node = outputs.get("sentence_embedding")
    if node is None:
        raise MemoriesError("model_invalid", f"{path} has no output 'sentence_embedding' (it has {sorted(outputs)})")
    if node.type != "tensor(float)" or len(node.shape) != 2 or node.shape[1] != DIMENSION:
        raise MemoriesError(
            "model_invalid",
            f"{path}: output 'sentence_embedding' is {node.type} {node.shape}, not float32 [batch, {DIMENSION}]",
        )


def _normalized(vectors: NDArray[Any]) -> FloatMatrix:
    """Rows of ``vectors`` scaled to unit L2 norm as float32; ``invalid_vector`` for a NaN, inf or zero row."""
    vectors = np.asarray(vectors, dtype=np.float32)
    finite = np.isfinite(vectors).all(axis=1)
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    bad = np.flatnonzero(~finite | (norms == 0) | ~np.isfinite(norms))
    if bad.size:
        raise MemoriesError(
            "invalid_vector",
            f"the model produced {bad.size} NaN, infinite or zero vector(s) in a batch of {len(vectors)}",
            {"rows": bad.tolist()},
        )
    return np.ascontiguousarray((vectors / norms[:, None]).astype(np.float32))
