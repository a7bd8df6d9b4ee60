"""Model API calls against the loopback fake (R-30, R-32, R-36, R-39): bodies, limits, retries, redirects.

The fake's clock and records are the evidence; nothing asserts on the client's timings.
"""

from __future__ import annotations

import pytest

from memories.config import EmbeddingConfig, HttpConfig
from memories.errors import MemoriesError
from memories.http.api import Endpoint, post_json
from memories.http.client import build_client
from memories.http.retry import RetryPolicy
from memories.providers.capabilities import EmbedText
from memories.providers.compatible import CompatibleEmbedding
from memories.providers.embedding import BatchLimit, embed_remote
from tests.fixtures.model_servers import ModelServer, Reply


def _service(server: ModelServer, batch_size: int = 32, dimensions: int | None = None) -> CompatibleEmbedding:
    config = EmbeddingConfig(
        protocol="compatible", url=server.url("embeddings"), model="fake", dimensions=dimensions, batch_size=batch_size
    )
    return CompatibleEmbedding(config)


def _embed(server: ModelServer, texts: list[str], **kwargs: object):  # type: ignore[no-untyped-def]
    service = _service(server, **kwargs)  # type: ignore[arg-type]
    with build_client(HttpConfig()) as client:
        return embed_remote(
            client,
            service,
            [EmbedText(text) for text in texts],
            task="document",
            dimension=None,
            limit=BatchLimit(),
            policy=RetryPolicy(retries=0),
        )


def test_a_stated_batch_limit_is_met_and_too_long_inputs_fail_alone(model_server: ModelServer) -> None:
    model_server.max_batch = 32
    model_server.max_input_chars = 500
    texts = [f"chunk {n} " + ("x" * 700 if n in (5, 50, 90) else "short") for n in range(100)]

    outcome = _embed(model_server, texts, batch_size=60)

    sizes = [len(call.body["input"]) for call in model_server.calls("embeddings")]
    assert sizes[0] == 60 and max(sizes[1:]) <= 32
    assert len(outcome.ok) == 97 and sorted(outcome.failed) == [5, 50, 90]
    assert all("input is too long" in reason and reason.startswith("HTTP 413") for reason in outcome.failed.values())
    assert outcome.vectors.shape == (97, 8)


def test_retries_wait_by_backoff_then_retry_after(model_server: ModelServer) -> None:
    model_server.script("embeddings", Reply(503), Reply(429, headers={"Retry-After": "1"}))
    service = _service(model_server)

    with build_client(HttpConfig()) as client:
        reply = post_json(client, service.endpoint(), {"model": "m", "input": ["a"]}, policy=RetryPolicy(2, 500))

    first, second, third = (call.at for call in model_server.calls("embeddings"))
    assert "data" in reply
    assert second - first >= 0.5 and third - second >= 1.0


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply(401, {"error": {"message": "bad key"}}), "auth_failed"),
        (Reply(302, b"", headers={"Location": "https://elsewhere.example/v1/embeddings"}), "unsafe_redirect"),
        (Reply(400, {"error": {"message": "unknown field dimensions"}}), "upstream_error"),
        (Reply(200, b"<html>"), "upstream_error"),
    ],
)
def test_failures_that_are_not_retried(model_server: ModelServer, reply: Reply, code: str) -> None:
    model_server.script("embeddings", reply)
    endpoint = Endpoint("rag.embedding", model_server.url("embeddings"), "bearer", None)

    with build_client(HttpConfig()) as client, pytest.raises(MemoriesError) as caught:
        post_json(client, endpoint, {"input": ["a"]}, policy=RetryPolicy(2, 1))

    assert caught.value.code == code and len(model_server.calls()) == 1
    if code == "auth_failed":  # issue 29, item 8: no key is configured, so none is named
        assert "set [rag.embedding] api_key_env" in caught.value.message


def test_a_refusal_names_the_key_variable_and_whether_it_is_set(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMORIES_TEST_KEY", raising=False)
    endpoint = Endpoint("rag.embedding", model_server.url("embeddings"), "bearer", "MEMORIES_TEST_KEY")
    for value, said in ((None, "MEMORIES_TEST_KEY is not set"), ("k", "check the key in the environment variable")):
        if value is not None:
            monkeypatch.setenv("MEMORIES_TEST_KEY", value)
        model_server.script("embeddings", Reply(401, {"error": {"message": "bad key"}}))
        with build_client(HttpConfig()) as client, pytest.raises(MemoriesError) as caught:
            post_json(client, endpoint, {"input": ["a"]}, policy=RetryPolicy(2, 1))
        assert caught.value.code == "auth_failed" and said in caught.value.message


def test_keys_go_in_the_protocol_header(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KEY", "k-123")
    with build_client(HttpConfig()) as client:
        post_json(
            client,
            Endpoint("e", model_server.url("embeddings"), "bearer", "FAKE_KEY"),
            {"input": ["a"]},
            policy=RetryPolicy(),
        )
        post_json(
            client,
            Endpoint("g", model_server.url("gemini_embed"), "x-goog-api-key", "FAKE_KEY"),
            {"content": {"parts": [{"text": "a"}]}},
            policy=RetryPolicy(),
        )

    bearer, google = model_server.calls()
    assert bearer.headers["authorization"] == "Bearer k-123" and "x-goog-api-key" not in bearer.headers
    assert google.headers["x-goog-api-key"] == "k-123" and "authorization" not in google.headers
