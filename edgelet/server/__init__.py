"""The local HTTP API: /healthz, /pods, /events, /metrics and /containerLogs on a root-only unix socket.

`http.py` is a small HTTP/1.1 server on asyncio streams and h11 (aiohttp
would cost ~12 MB on a 512 MB device); `routes.py` parses requests purely;
`health.py` holds kubelet's healthz rules; `metrics.py` the Prometheus
metrics and the instrumented runtime; `api.py` binds them to a running agent.
The node API on TCP is `nodeapi.py` (authentication and grants in `auth.py`).
Exec, attach and port-forward are routed and authorized here; their sessions
are `edgelet.streaming`'s, reached through its public modules only.
"""
