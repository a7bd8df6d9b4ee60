"""A model service's reply read within bounds (issue 29, item 13): a gzip body is inflated at most
MAX_REPLY_BYTES (once per encoding layer, never a whole network read at once), and JSON nested deeper than
MAX_JSON_DEPTH is ``invalid_model_output`` (it was ``internal_error`` through a ``RecursionError``).

Against the loopback fake model server; memory is measured with :mod:`tracemalloc` (the inflated bytes are Python
objects), not with timings.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Callable

import pytest

from memories.config import HttpConfig
from memories.errors import MemoriesError
from memories.http import api
from memories.http.api import Endpoint, post_json
from memories.http.client import build_client
from memories.http.replies import depth_exceeds
from memories.http.retry import RetryPolicy
from tests.fixtures.model_servers import ModelServer, Reply

LIMIT = 1024 * 1024
"""MAX_REPLY_BYTES in these tests: small, so that a bomb is a few kilobytes."""


def _post(server: ModelServer, reply: Reply) -> object:
    server.script("embeddings", reply)
    endpoint = Endpoint("rag.embedding", server.url("embeddings"), "bearer", None)
    with build_client(HttpConfig()) as client:
        return post_json(client, endpoint, {"input": ["a"]}, policy=RetryPolicy(0, 1))


def _peak_while(run: Callable[[], object]) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    caught = None
    try:
        run()
    except Exception as exc:
        caught = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, caught


@pytest.mark.parametrize("layers", [1, 2])
def test_a_gzip_bomb_is_refused_without_inflating_it(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch, layers: int
) -> None:
    monkeypatch.setattr(api, "MAX_REPLY_BYTES", LIMIT)
    body = b"[" + b"0," * (40 * LIMIT // 2) + b"0]"  # 40 MB of JSON
    for _ in range(layers):
        body = gzip.compress(body, 9)
    assert len(body) < LIMIT // 4
    encoding = ", ".join(["gzip"] * layers)

    peak, caught = _peak_while(lambda: _post(model_server, Reply(200, body, {"Content-Encoding": encoding})))

    assert peak < 6 * LIMIT, f"{peak:,} bytes held for a {len(body):,}-byte reply"
    assert isinstance(caught, MemoriesError) and caught.code == "upstream_error", caught
    assert "once decompressed" in caught.message


def test_compressed_replies_within_the_bound_are_read(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api, "MAX_REPLY_BYTES", LIMIT)
    reply = {"data": [{"embedding": [0.5] * 1000, "index": 0}]}
    text = json.dumps(reply).encode()
    raw_deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    bodies = {
        "gzip": gzip.compress(text),
        "x-gzip": gzip.compress(text[:100]) + gzip.compress(text[100:]),  # two gzip members
        "deflate": zlib.compress(text),
        "gzip, deflate": zlib.compress(gzip.compress(text)),
    }
    for encoding, body in bodies.items():
        assert _post(model_server, Reply(200, body, {"Content-Encoding": encoding})) == reply, encoding
    body = raw_deflate.compress(text) + raw_deflate.flush()
    assert _post(model_server, Reply(200, body, {"Content-Encoding": "deflate"})) == reply
    assert model_server.calls()[0].headers["accept-encoding"] == "gzip, deflate"


def test_an_encoding_that_is_not_read_is_named(model_server: ModelServer) -> None:
    with pytest.raises(MemoriesError) as caught:
        _post(model_server, Reply(200, b"\x0b\x02\x80{}\x03", {"Content-Encoding": "br"}))
    assert caught.value.code == "upstream_error" and "Content-Encoding br" in caught.value.message


@pytest.mark.parametrize("depth", [65, 200_000])
def test_a_deeply_nested_reply_is_invalid_model_output(model_server: ModelServer, depth: int) -> None:
    body = b'{"data": ' + b"[" * depth + b"]" * depth + b"}"

    with pytest.raises(MemoriesError) as caught:
        _post(model_server, Reply(200, body))

    assert caught.value.code == "invalid_model_output" and "nested more than 64" in caught.value.message


def test_a_failed_reply_nested_deeply_is_quoted_as_text(model_server: ModelServer) -> None:
    body = b'{"error": {"message": ' + b"[" * 100_000 + b"}}"

    with pytest.raises(MemoriesError) as caught:
        _post(model_server, Reply(400, body))

    assert caught.value.code == "upstream_error" and caught.value.message.endswith("[[[…")


def test_depth_is_counted_outside_strings_only() -> None:
    assert not depth_exceeds(b'{"a": "' + b"[" * 1000 + b'"}', 3)
    assert not depth_exceeds(b'[[["\\"[[[[[["]]]', 3)
    assert depth_exceeds(b'[[["\\"[[[[[["]]]]', 2)
    assert not depth_exceeds(b"[]" * 100_000, 1)
    assert depth_exceeds(b"[" * 65 + b"]" * 65, 64) and not depth_exceeds(b"[" * 64 + b"]" * 64, 64)
