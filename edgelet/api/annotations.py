"""Every annotation key edgelet reads or writes on Pods, defined once.

The `kubernetes.io/config.*` keys are kubelet's (pkg/kubelet/types/pod_update.go);
`edgelet.io/origin` is edgelet's own record of the file or URL a pod came from.
The runtime's keys on containers (`io.kubernetes.container.*`, `io.edgelet.*`)
are the runtime's business and live with its on-disk layout.
"""

from __future__ import annotations

CONFIG_SOURCE = "kubernetes.io/config.source"  # "file" or "http"
CONFIG_HASH = "kubernetes.io/config.hash"  # the static pod's UID
CONFIG_SEEN = "kubernetes.io/config.seen"  # first seen, RFC 3339 with nanoseconds
CONFIG_MIRROR = "kubernetes.io/config.mirror"  # on a mirror pod: the static pod's hash
ORIGIN = "edgelet.io/origin"  # file path or URL of the manifest

# Health-gated rollout (edgelet.rollout): "off" gives kubelet's kill-and-start for this pod; the gate's deadline
# and stability window as durations ("90s", "5m").
ROLLOUT = "edgelet.io/rollout"
ROLLOUT_DEADLINE = "edgelet.io/rollout-deadline"
ROLLOUT_STABILITY_WINDOW = "edgelet.io/rollout-stability-window"
ROLLOUT_STRATEGY = "edgelet.io/rollout-strategy"  # "Replace" (the default) or "Surge"
ROLLOUT_OFF = frozenset({"off", "false", "disabled", "no"})
ROLLOUT_ON = frozenset({"on", "true", "enabled", "yes"})
