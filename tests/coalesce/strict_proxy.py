"""A strict Coalesce of our own for the tests: a proxy in front of the local simulator that refuses the jobs
collection (404) and any ``startingFrom`` without ``orderBy`` (400), whatever the simulator would answer, and
keeps every request it saw (``docs/coalesce-contract.md`` rows 3 and 11)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx

from dw_local.world import free_port

JOBS_COLLECTION = re.compile(r"^/api/v1/environments/[^/]+/jobs/?$")
JOB_BY_ID = re.compile(r"^/api/v1/environments/[^/]+/jobs/(\d+)$")


class StrictProxy:
    """Forwards to ``upstream``, refusing what the real Coalesce may not have; every request is kept."""

    def __init__(self, upstream: str):
        self.upstream = httpx.Client(base_url=upstream, timeout=60)
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.refused: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                proxy.requests.append((self.command, url.path, query))
                if self.command == "GET" and JOBS_COLLECTION.match(url.path):
                    return self._refuse(404, "Not found.", url.path)
                if "startingFrom" in query and "orderBy" not in query:
                    return self._refuse(400, "startingFrom requires orderBy", self.path)
                length = int(self.headers.get("Content-Length") or 0)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")
                }
                response = proxy.upstream.request(
                    self.command,
                    self.path,
                    content=self.rfile.read(length) if length else None,
                    headers=headers,
                )
                self.send_response(response.status_code)
                for name in ("Content-Type", "Retry-After"):
                    if name in response.headers:
                        self.send_header(name, response.headers[name])
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            def _refuse(self, status: int, message: str, what: str) -> None:
                proxy.refused.append(what)
                body = json.dumps(
                    {"error": {"errorString": f"{status}: {message}", "errorDetail": what}}
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.upstream.close()

    def job_ids_read(self) -> list[int]:
        return sorted(int(m[1]) for _, path, _ in self.requests if (m := JOB_BY_ID.match(path)))

    def clear(self) -> None:
        self.requests.clear()
        self.refused.clear()
