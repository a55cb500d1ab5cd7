"""The streaming sessions behind exec, attach and port-forward, as kubelet keeps `cri/streaming`: the server routes
and authorizes a request, then hands the upgraded connection to a session here.

`execproto.py` and `localexec.py` are `edgelet exec`'s protocol on the local
socket; `spdy.py` a server-side SPDY/3.1 subset and `wschannel.py` kubelet's
WebSocket channel protocols, the two framings kubectl speaks; `remotecommand.py`
the exec, attach and port-forward sessions carried over either.
"""
