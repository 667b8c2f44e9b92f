"""A server that records every request reaching it: an attacker's host, or a Slack app's Request URL."""

from __future__ import annotations

import http.server
import threading


class Capture(http.server.ThreadingHTTPServer):
    """The attacker's server: records every request that reaches it."""

    def __init__(self):
        self.requests: list[tuple[str, str, bytes]] = []
        capture = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                capture.requests.append((self.command, self.path, body))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = _record

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"
