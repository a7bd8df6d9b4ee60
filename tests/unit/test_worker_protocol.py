"""The two protocols: the public client protocol and the internal worker protocol, each with its own version;
every worker request declares the types of its reply."""

from __future__ import annotations

import subprocess
import sys
from typing import get_args

import msgspec

from memories import protocol as p
from memories import worker_protocol as w


def test_every_worker_request_declares_its_reply_types() -> None:
    replies = set(get_args(w.WorkerReplyBody))
    for request in get_args(w.WorkerRequestBody):
        assert request.reply_types, f"{request.__name__} declares no reply type"
        assert set(request.reply_types) <= replies, request.__name__
    assert w.IndexQuery.reply_types == (w.IndexHits, w.IndexStale, w.VectorsWanted)
    assert w.EmbedBatch.reply_types == (w.Vectors,)


def test_the_client_and_worker_protocols_have_separate_versions() -> None:
    assert not hasattr(p, "WORKER_PROTOCOL_VERSION") and not hasattr(w, "PROTOCOL_VERSION")
    hello = w.WorkerHello(name="index", protocol=w.WORKER_PROTOCOL_VERSION, install=w.INSTALL)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(hello))["protocol"] == w.WORKER_PROTOCOL_VERSION
    envelope_fields = {f.name for f in msgspec.structs.fields(p.Envelope)}
    assert "protocol" in envelope_fields  # the client's own version travels in every envelope


def test_worker_messages_carry_structs_not_encoded_bytes() -> None:
    raw = {
        f"{message.__name__}.{field.name}"
        for message in (*get_args(w.WorkerRequestBody), *get_args(w.WorkerReplyBody))
        for field in msgspec.structs.fields(message)
        if field.type in (bytes, bytes | None)
    }
    # Only float32 arrays travel as bytes; manifests and HTTP settings are structs.
    assert raw == {
        "IndexStoreVectors.vectors",
        "IndexLoadVectors.vectors",
        "IndexQuery.query_vector",
        "Vectors.vectors",
        "RemoteVectors.vectors",
        # An index snapshot is opaque to the supervisor by design: it seals and unseals it without decoding it.
        "IndexSnapshot.data",
        "IndexRestore.data",
    }
    # A record's set for sealing is a struct of its own, its vectors float32 bytes too.
    assert {f.name: f.type for f in msgspec.structs.fields(w.RecordVectorSet)}["vectors"] is bytes


def test_a_worker_hit_is_not_a_citation() -> None:
    worker_fields = {f.name for f in msgspec.structs.fields(w.WorkerHit)}
    public_fields = {f.name for f in msgspec.structs.fields(p.SearchHit)}
    assert public_fields - worker_fields == {"label"}


def test_the_client_side_never_loads_the_worker_protocol() -> None:
    code = "import sys, memories.cli, memories.client; print('memories.worker_protocol' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
