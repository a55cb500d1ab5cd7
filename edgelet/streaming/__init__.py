"""The streaming sessions behind exec, attach and port-forward, as kubelet keeps `cri/streaming`: the server routes
and authorizes a request, then hands the upgraded connection to a session here.

Public modules (what the server and the CLI import):

- `remotecommand.py`: kubelet's remote command protocols as pure decisions
  (negotiation, options, the streams a request needs, the error stream);
- `remoteexec.py`, `attach.py`, `portforward.py`: one session each, over
  SPDY streams or WebSocket channels alike;
- `spdy.py`: a server-side SPDY/3.1 session; `wschannel.py`: kubelet's
  WebSocket channel protocols, the two framings kubectl speaks;
- `execproto.py` and `localexec.py`: `edgelet exec`'s protocol on the local
  socket and its session;
- `errors.py`: what streaming raises (`RequestRefused` carries the HTTP
  status the server answers with).

Modules with a leading underscore (`_spdyframes.py`: SPDY's wire format;
`_execio.py`: the descriptors between a session and `runc exec`) are
streaming's own: an import contract keeps every other package out of them.
"""
