"""What streaming raises: a request refused before its upgrade, and sessions whose peer broke the protocol.

Streaming knows nothing of HTTP servers: a refusal carries the status the
server answers with, and the server maps it to its own error (a v1 Status)::

    StreamingError                 anything streaming raises
    ├── RequestRefused             an exec, attach or port-forward request that cannot be served (no protocol in
    │                              common, options missing or wrong); `status` is the HTTP code to answer with
    ├── spdy.SpdyError             a SPDY peer broke the protocol or the session ended; `status` is its GOAWAY's
    │   │                          (these three are defined with the frames in `_spdyframes.py`)
    │   ├── spdy.StreamError       one stream broke the protocol: it is reset, the session goes on
    │   ├── spdy.StreamReset       the stream was reset (or the connection ended) before a read or write finished
    │   └── remotecommand.SessionError  a session's streams did not all come in time
    └── execproto.ProtocolError    an `edgelet exec` peer broke the session's protocol
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class StreamingError(EdgeletError):
    """A streaming request or session that cannot be carried out."""


class RequestRefused(StreamingError):
    """A request refused before the upgrade; `status` is the HTTP code (400 bad options, 403 no protocol)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
