"""``grouprl generate`` requests are bounded like every outbound request (issue 32, class 3): a server that
trickles its body or streams one for ever fails the request within ``timeout``, the run goes on and says so.
The server is a real one on 127.0.0.1 (tests/hostile_http.py)."""

from __future__ import annotations

import json
import time

import pytest

from grouprl.generate.pipeline import GenerationFailed, generate
from grouprl.generate.spec import GenerateSpec
from hostile_http import MB, Handler, HostileServer


@pytest.mark.parametrize("model", ["trickle", "chunked_huge", "declared_huge"])
def test_a_trickling_or_endless_server_fails_the_request_within_its_timeout(tmp_path, model):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(2)))
    with HostileServer() as server:
        spec = GenerateSpec(
            dataset=str(data),
            model=model,
            base_url=server.base_url,
            output_dir=str(tmp_path / "out"),
            timeout=1.0,
            retries=0,
            progress=False,
        )
        start = time.monotonic()
        with pytest.raises(GenerationFailed, match="2 of 2 requests failed"):
            generate(spec)
    assert time.monotonic() - start < 5.0
    assert Handler.sent < 64 * MB
