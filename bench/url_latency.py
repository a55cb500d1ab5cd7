"""URL change -> container running: from the GET that first serves a changed manifest to the new container's process running.

The poll interval is excluded, as the issue asks: the loopback server notes
when it first hands out each new body, and the new pod's container touches a
file in a hostPath when it starts. Each change renames the pod, so every
step is a REMOVE of the old pod plus an ADD of the new one (the old one is
stopped in parallel, as an edit would be).

Run as root: `.venv/bin/python bench/url_latency.py [--changes 20]`. Prints median and p90.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, machine, percentile, pod_manifest, wait_file


class Server:
    """Serves `body`; records the monotonic time it first served each version."""

    def __init__(self) -> None:
        self.body = b""
        self.version = 0
        self.first_served: dict[int, float] = {}
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    body, version = outer.body, outer.version
                    outer.first_served.setdefault(version, time.monotonic())
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/pods.yaml"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def serve(self, body: str) -> int:
        self.version += 1
        self.body = body.encode()
        return self.version

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--poll", default="1s", help="--http-check-frequency of the agent")
    args = ap.parse_args()
    b = Bench("url")
    server = Server()
    lat: list[float] = []
    try:
        out = b.base / "out"
        out.mkdir()
        os.chmod(out, 0o777)
        server.serve(pod_manifest("v0", "touch /out/v0; exec sleep 3600", host_dir=str(out)))
        b.start_agent("--manifest-url", server.url, "--http-check-frequency", args.poll)
        wait_file(out / "v0", timeout=60)  # warm-up: image import, first sandbox
        for i in range(1, args.changes + 1):
            version = server.serve(pod_manifest(f"v{i}", f"touch /out/v{i}; exec sleep 3600", host_dir=str(out)))
            t1 = wait_file(out / f"v{i}", timeout=60)
            lat.append(t1 - server.first_served[version])
            time.sleep(0.3)  # let the old pod finish stopping before the next change
    finally:
        server.close()
        b.close()
    print(f"machine: {machine()}")
    print(f"changes: {args.changes} (each: REMOVE the old pod, ADD a new one; pause sandbox + 1 busybox container)")
    print(
        f"edgelet  URL fetch->running: median {statistics.median(lat) * 1000:.1f} ms"
        f"  p90 {percentile(lat, 0.9) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
