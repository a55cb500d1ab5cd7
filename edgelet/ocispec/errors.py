"""Why a pod cannot be expressed as an OCI runtime spec.

Hierarchy::

    SpecError(EdgeletError, ValueError)   the pod asks for something that cannot be expressed;
    │                                     the runtime reports it as CreateContainerConfigError
    ├── EnvError                          an env var or command that cannot be resolved
    └── SecurityError                     security settings that cannot be satisfied

EnvError and SecurityError name a field; the builder wraps them in a
SpecError naming the pod and container.
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class SpecError(EdgeletError, ValueError):
    """The pod asks for something that cannot be expressed (CreateContainerConfigError)."""


class EnvError(SpecError):
    """An env var or command that cannot be resolved (the builder turns it into a SpecError)."""


class SecurityError(SpecError):
    """The security settings cannot be satisfied (the builder turns it into a SpecError)."""
