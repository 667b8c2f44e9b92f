"""A server that records every request reaching it: an attacker's host, or a Slack app's Request URL."""

from __future__ import annotations

import http.server
import threading
import time


class Capture(http.server.ThreadingHTTPServer):
    """The attacker's server: records every request that reaches it."""

    def __init__(self, status: int = 200, delay: float = 0.0):
        """``status`` and ``delay`` (seconds before answering): how the app behind the URL answers."""
        self.requests: list[tuple[str, str, bytes]] = []
        capture = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                capture.requests.append((self.command, self.path, body))
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b"{}")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller stopped waiting (a Slack stand-in past its 3 seconds)

            do_GET = do_POST = do_PUT = _record

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"
