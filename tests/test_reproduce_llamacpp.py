"""The served-model launcher (orchenv.reproduce.llamacpp): missing pieces are named with the
install command; the wait, the failure reports and the shutdown run against a tiny fake server
(llama.cpp itself is exercised by tests/live and `orchenv reproduce 001`)."""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

import pytest

from orchenv.reproduce import llamacpp

FAKE = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/v1/models"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b'{"data": []}' if ok else b"")
    def log_message(self, *a):
        pass
print("fake server up", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); count it as ended
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_missing_names_the_gguf_and_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv(llamacpp.GGUF_ENV, str(tmp_path / "absent.gguf"))
    reason = llamacpp.missing()
    assert reason is not None
    assert "absent.gguf" in reason or "llama-cpp-python" in reason
    if "llama-cpp-python" in reason:
        assert llamacpp.INSTALL in reason
    with pytest.raises(llamacpp.LlamaCppMissing), llamacpp.serve(log=tmp_path / "log"):
        pass  # pragma: no cover


def test_run_server_waits_yields_and_stops(tmp_path):
    port = llamacpp.free_port()
    url = f"http://127.0.0.1:{port}/v1"
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    log = tmp_path / "logs" / "server.log"
    with llamacpp.run_server([sys.executable, str(script), str(port)], url, log) as pid:
        with urllib.request.urlopen(url + "/models", timeout=5) as reply:
            assert reply.status == 200
        assert _alive(pid)
    assert not _alive(pid)
    assert "fake server up" in log.read_text()


def test_a_server_that_exits_is_reported_with_its_log(tmp_path):
    port = llamacpp.free_port()
    command = [sys.executable, "-c", "print('model file is corrupt'); raise SystemExit(3)"]
    server = llamacpp.run_server(command, f"http://127.0.0.1:{port}/v1", tmp_path / "l")
    with pytest.raises(llamacpp.LlamaServerError, match="exited \\(3\\)(.|\\n)*corrupt"), server:
        pass  # pragma: no cover


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path):
    port = llamacpp.free_port()
    command = [sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(60)"]
    url = f"http://127.0.0.1:{port}/v1"
    server = llamacpp.run_server(command, url, tmp_path / "l", startup_s=1.0)
    with pytest.raises(llamacpp.LlamaServerError, match="within 1 s(.|\\n)*loading"), server:
        pass  # pragma: no cover
