"""An OpenAI-compatible model endpoint on loopback that a test can take down and bring back.

While up it answers as the offline model would (over real HTTP, streamed, through the SDK of the
worker processes that call it); while down it fails every request the way ``mode`` says: ``503``
(a gateway whose upstream is gone), ``refused`` (nothing listens on the port) or ``silent`` (it
accepts and never answers: the SDK's read timeout). Workers reach it as ``openai:<model>`` with
``OPENAI_BASE_URL=endpoint.url``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

from agents.models import AgentProfile
from agents.offline_model import OfflineDeterministicModel
from agents.profiles import active_profile
from tests.agents.openai_server import _Chunks, _Handler, _QuietServer, _Text, _ToolCalls


class ModelEndpoint:
    def __init__(self, *, mode: str = "503") -> None:
        self.mode = mode
        self.down = False
        self.answered = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._model = OfflineDeterministicModel(token_delay_ms=0)
        self._httpd: _QuietServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def worker_env(self) -> dict[str, str]:
        env = {"OPENAI_BASE_URL": self.url, "OPENAI_API_KEY": "sk-test"}
        if self.mode == "silent":  # a step cut at 5 s: a silent endpoint costs seconds a try, not minutes
            env["AGENT_MODEL_STEP_SECONDS"] = "5"
        return env

    def use_for_new_runs(self) -> None:
        AgentProfile.objects.filter(pk=active_profile().pk).update(model="openai:outage-test")

    def start(self) -> ModelEndpoint:
        self._listen()
        return self

    def stop(self) -> None:
        self._close()

    def go_down(self) -> None:
        with self._lock:
            self.down = True
        if self.mode == "refused":
            self._close()

    def come_back(self) -> None:
        with self._lock:
            self.down = False
        if self.mode == "refused" and self._httpd is None:
            self._listen()

    # --- serving ---------------------------------------------------------------------

    def _listen(self) -> None:
        endpoint = self

        class Handler(_Handler):
            owner = SimpleNamespace(dialect="openai")  # type: ignore[assignment]

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                endpoint._serve(self, body)

        httpd = _QuietServer(("127.0.0.1", self.port), Handler)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def _close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def _serve(self, handler: _Handler, body: dict[str, Any]) -> None:
        with self._lock:
            down = self.down
        if down:
            with self._lock:
                self.refused += 1
            if self.mode == "silent":
                time.sleep(30)
                handler.close_connection = True
                return
            handler._send_error(503, "the model's upstream is unavailable (test outage)")
            return
        response = self._model.complete(messages=body["messages"], tools=body.get("tools") or [])
        if response.tool_calls:
            item: _Text | _ToolCalls = _ToolCalls(
                [(c.id, c.name, c.arguments) for c in response.tool_calls], response.text, 11, None
            )
        else:
            item = _Text(response.text, 11, None)
        handler._start_stream()
        for chunk in _Chunks(body, include_usage=True).for_script(item):
            handler._send_event(json.dumps(chunk))
        handler._send_event("[DONE]")
        handler._end_stream()
        with self._lock:
            self.answered += 1


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0
