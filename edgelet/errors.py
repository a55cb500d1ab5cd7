"""The root of every error edgelet raises on purpose, and the map of the whole tree.

Library code raises; only the CLI (and the agent's top level) turns an error
into a message and an exit status. Every package that fails in its own ways
has an `errors.py` whose docstring draws its part of the tree; each root
below subclasses `EdgeletError`, so `except EdgeletError` catches everything
edgelet means to raise and lets programming errors through::

    EdgeletError
    ├── api.errors.ApiError                manifests: decoding, validation, quantities (also ValueError)
    ├── container.errors.RuntimeError_     the container runtime: exec, sandbox, create/start/stop, volumes
    │                                      (runtime.rootfs.RootfsError below it is also an OSError)
    ├── images.errors.ImageError           references, store, archives, pulls, credentials, unpacking
    ├── trust.errors.TrustError            trusted keys and signature policies that cannot be used, refused signatures
    ├── ocispec.errors.SpecError           a pod that cannot be expressed as an OCI spec
    │                                      (CreateContainerConfigError at the runtime boundary)
    ├── network.errors.NetworkError        CNI: the conflist, a plugin's failure
    ├── tunnel.errors.TunnelError          the WireGuard tunnel: its config file (file:line), the interface
    ├── cgroups.errors.CgroupError         cgroup files cannot be written or removed
    ├── probes.errors.ProbeError           probes and lifecycle hooks
    ├── eviction.errors.EvictionConfigError  an eviction threshold or grace period that cannot be parsed
    ├── rollout.errors.RolloutError       a rollout request (`edgelet rollout retry`) that cannot be carried out
    ├── update.errors.UpdateError         a release refused or an update step that failed (`edgelet update`)
    ├── mirror.errors.MirrorError          the apiserver link: kubeconfig, labels, unreachable, refusals
    ├── sources.http.BodyProblem           a fetched manifest body that cannot be used (also ValueError)
    ├── logs.LogNotFoundError              no log file for a container instance
    ├── settings.SettingsError             configuration file, environment or flags
    ├── wiring.ConfigurationError          the settings ask for what this machine does not have
    ├── server.http.ServerError            an API listener cannot be opened
    ├── server.routes.HttpError            a request the API refuses (rendered as a v1 Status)
    ├── server.auth.AuthConfigError        the node API's token file or grants cannot be used
    ├── server.tls.TlsError                the node API's certificate, key or CA cannot be loaded or made
    ├── streaming.errors.StreamingError    exec, attach and port-forward: a refused request (its HTTP status), a broken
    │                                      protocol (SPDY, WebSocket, `edgelet exec`)
    ├── sdnotify.NotifyError               systemd notification socket
    ├── util.logind.LogindUnavailable      no logind on the system bus (shutdown falls back to SIGTERM)
    ├── util.headerfile.HeaderFileError    a URL's header file cannot be read or parsed (flag, file, line)
    ├── util.files.NotRegularFile          a FIFO, device or symlink where a dropped file belongs (also OSError)
    ├── cli.client.AgentError              the agent answered a CLI request with an error
    └── cli.common.CommandError            a command-line request that cannot be carried out

Every package with an `errors.py` draws its own part of the tree there;
`tests/unit/test_errors_tree.py` keeps this map and those trees true.

Errors carry their context (pod, container, path, command, stderr tail) as
attributes and in `str()`, and are raised `from` their cause.
"""

from __future__ import annotations


class EdgeletError(Exception):
    """Base of every error edgelet raises on purpose; `str()` is a complete message for a user."""
