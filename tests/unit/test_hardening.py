"""Process hardening in a fresh interpreter: core dumps off, non-dumpable, owner-only umask."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memories.config import Config, EmbeddingConfig, GenerationConfig, RagConfig, RerankConfig
from memories.daemon.supervisor import worker_environments

SCRIPT = """
import json, os, resource
from memories.hardening import dumpable, harden_process
before = dumpable()
harden_process()
print(json.dumps({"before": before, "after": dumpable(), "core": resource.getrlimit(resource.RLIMIT_CORE),
                  "umask": os.umask(0o077)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_DUMPABLE) is Linux only")
def test_harden_process_turns_core_dumps_off(repo_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, cwd=repo_root, timeout=60
    )
    state = json.loads(done.stdout)
    assert state == {"before": True, "after": False, "core": [0, 0], "umask": 0o077}


MCP_SCRIPT = """
import json, os, resource, sys
import memories.mcp.server
from memories.hardening import dumpable
def serve_stdio(home):  # stands in for the SDK's stdio loop: report the state the server would run in
    print(json.dumps({"dumpable": dumpable(), "core": resource.getrlimit(resource.RLIMIT_CORE)}))
memories.mcp.server.serve_stdio = serve_stdio
sys.argv = ["memories", "--home", sys.argv[1], "mcp", "serve"]
from memories.cli import main
main()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_DUMPABLE) is Linux only")
def test_mcp_serve_turns_core_dumps_off_before_it_serves(repo_root: Path, tmp_path: Path) -> None:
    """Issue 21, item 7: the MCP server holds a grant token and relays notes, like the daemon it talks to."""
    done = subprocess.run(
        [sys.executable, "-c", MCP_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=repo_root,
        timeout=60,
    )
    assert json.loads(done.stdout) == {"dumpable": False, "core": [0, 0]}


def test_api_keys_and_proxy_credentials_reach_only_the_remote_worker() -> None:
    """Issue 21, item 7: the index and embedding workers run parsers and a model on note text; they need no key."""
    rag = RagConfig(
        embedding=EmbeddingConfig(
            protocol="compatible", url="https://e.example/v1", model="m", api_key_env="EMBED_KEY"
        ),
        generation=GenerationConfig(protocol="gemini", url="https://g.example/x", model="m", api_key_env="GEN_KEY"),
        rerank=RerankConfig(protocol="compatible", url="https://r.example/v1", model="m", api_key_env="RERANK_KEY"),
    )
    environ = {
        "PATH": "/usr/bin",
        "EMBED_KEY": "k1",
        "GEN_KEY": "k2",
        "RERANK_KEY": "k3",
        "https_proxy": "http://user:secret@proxy:3128",
        "ALL_PROXY": "socks5h://u:s@proxy:1080",
    }
    environments = worker_environments(Config(rag=rag), environ)
    for name in ("index", "embedding"):
        assert not {"EMBED_KEY", "GEN_KEY", "RERANK_KEY", "https_proxy", "ALL_PROXY"} & set(environments[name]), name
        assert environments[name]["PATH"] == "/usr/bin"
    assert {k: environments["remote"][k] for k in environ} == environ


HTTP_LOG_SCRIPT = """
import logging
import httpx
from memories.logs import configure_worker_logging
configure_worker_logging("remote")
client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200)))
client.get("https://cdn.example/model.onnx?X-Amz-Signature=SIGNED")
logging.getLogger("memories.download").info("downloaded model.onnx")
"""


def test_workers_keep_httpx_from_logging_signed_urls(repo_root: Path) -> None:
    """Issue 21, item 7: httpx logs each request's URL at INFO; a download's URL after a redirect is signed."""
    done = subprocess.run(
        [sys.executable, "-c", HTTP_LOG_SCRIPT], capture_output=True, text=True, check=True, cwd=repo_root, timeout=60
    )
    assert "downloaded model.onnx" in done.stderr  # the worker's own INFO lines still go to the log
    assert "SIGNED" not in done.stderr and "HTTP Request" not in done.stderr
