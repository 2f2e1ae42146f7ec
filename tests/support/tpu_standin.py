"""A local stand-in for the slice of the Cloud TPU v2 REST API the GCP adapter reads:
``GET /v2/projects/{project}/locations/{zone}/nodes`` and ``.../acceleratorTypes`` (both paged by
``pageSize``/``pageToken``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


@dataclass
class TpuStandin:
    endpoint: str = ""
    nodes: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (project, zone) -> name: state
    accelerator_types: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (project, zone) -> types
    page_size: int = 2  # small, so the client's paging is exercised
    requests: list[str] = field(default_factory=list)
    fail_with: int | None = None  # answer every request with this HTTP status


def _handler(standin: TpuStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            standin.requests.append(url.path)
            if standin.fail_with is not None:
                self._send(standin.fail_with, {"error": {"code": standin.fail_with, "message": "stand-in failure"}})
                return
            parts = url.path.strip("/").split("/")
            if (
                len(parts) != 6
                or parts[0] != "v2"
                or parts[1] != "projects"
                or parts[3] != "locations"
                or parts[5] not in ("nodes", "acceleratorTypes")
            ):
                self._send(404, {"error": {"code": 404, "message": f"no route {url.path}", "status": "NOT_FOUND"}})
                return
            project, zone = parts[2], parts[4]
            start = int(parse_qs(url.query).get("pageToken", ["0"])[0] or 0)
            if parts[5] == "acceleratorTypes":
                types = sorted(standin.accelerator_types.get((project, zone), []))
                listed: dict[str, Any] = {
                    "acceleratorTypes": [
                        {"name": f"projects/{project}/locations/{zone}/acceleratorTypes/{t}", "type": t}
                        for t in types[start : start + standin.page_size]
                    ]
                }
                if start + standin.page_size < len(types):
                    listed["nextPageToken"] = str(start + standin.page_size)
                self._send(200, listed)
                return
            names = sorted(standin.nodes.get((project, zone), {}).items())
            page = names[start : start + standin.page_size]
            body: dict[str, Any] = {
                "nodes": [
                    {
                        "name": f"projects/{project}/locations/{zone}/nodes/{name}",
                        "acceleratorType": "v5litepod-8",
                        "state": state,
                        "health": "HEALTHY",
                    }
                    for name, state in page
                ]
            }
            if start + standin.page_size < len(names):
                body["nextPageToken"] = str(start + standin.page_size)
            self._send(200, body)

    return Handler


@contextmanager
def tpu_standin() -> Iterator[TpuStandin]:
    standin = TpuStandin()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(standin))
    standin.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield standin
    finally:
        server.shutdown()
        server.server_close()
