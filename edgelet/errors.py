"""The root of every error edgelet raises on purpose, and the map of the whole tree.

Library code raises; only the CLI (and the agent's top level) turns an error
into a message and an exit status. Every package that fails in its own ways
has an `errors.py` whose docstring draws its part of the tree; each root
below subclasses `EdgeletError`, so `except EdgeletError` catches everything
edgelet means to raise and lets programming errors through::

    EdgeletError
    ├── api.errors.ApiError                manifests: decoding, validation, quantities (also ValueError)
    ├── container.errors.RuntimeError_     the container runtime: exec, sandbox, create/start/stop, volumes
    ├── images.errors.ImageError           references, store, archives, pulls, credentials, unpacking
    ├── ocispec.errors.SpecError           a pod that cannot be expressed as an OCI spec
    │                                      (CreateContainerConfigError at the runtime boundary)
    ├── cgroups.errors.CgroupError         cgroup files cannot be written or removed
    ├── probes.errors.ProbeError           probes and lifecycle hooks
    ├── settings.SettingsError             configuration file, environment or flags
    ├── server.errors.ServerError          the local API server cannot listen
    ├── sdnotify.NotifyError               systemd notification socket
    └── cli.CommandError                   a command-line request that cannot be carried out

Errors carry their context (pod, container, path, command, stderr tail) as
attributes and in `str()`, and are raised `from` their cause.
"""

from __future__ import annotations


class EdgeletError(Exception):
    """Base of every error edgelet raises on purpose; `str()` is a complete message for a user."""
