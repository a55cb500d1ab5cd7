"""What a card may bring: the keys its unsigned config.toml may set, and the files it must not keep."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Files a card may carry that must not stay on a FAT partition (no permissions: every local user reads
# them); packaging's edgelet-card-setup moves them to /etc/edgelet at boot, edgelet warns while they remain.
CARD_SECRETS = ("kubeconfig", "auth.json", "manifest-url-headers", "api-tokens.csv", "wireguard.conf")
# What a card's unsigned config.toml may set: only keys that cannot widen what runs on the device or who can
# reach it. Whoever holds the card for a minute must not be able to turn verification off, name a program to
# run as root (the FAT partition is theirs), open the node API or relax a pod's confinement; those keys come
# from the node's own config file, its environment or its flags. Every other key on the card is ignored and
# reported (docs/trusted-delivery.md, "The card"). The eviction thresholds are not here: their text is
# parsed only when the agent starts (edgelet.eviction sits above settings), so a bad one from the card would
# stop the agent at every start, and a threshold near capacity evicts every pod.
CARD_KEYS = frozenset(
    {
        "hostname_override",
        "node_labels",
        "register_with_taints",
        "register_node",
        "node_ip",
        "file_check_frequency",
        "runonce_timeout",
        "pod_infra_container",
        "image_gc_high_threshold",
        "image_gc_low_threshold",
        "image_minimum_gc_age",
        "container_log_max_size",
        "container_log_max_files",
        "container_log_monitor_interval",
        "eviction_max_pod_grace_period",
        "eviction_pressure_transition_period",
        "eviction_monitoring_interval",
        "cni_check_period",
        "system_reserved",
        "kube_reserved",
        "shutdown_grace_period",
        "shutdown_grace_period_critical_pods",
        "node_status_update_frequency",
        "node_status_report_frequency",
        "node_lease_duration_seconds",
        "node_lease_renew_interval",
        "verbosity",
        "rollout",
        "rollout_deadline",
        "rollout_stability_window",
        "rollout_strategy",
    }
)
# A manifest URL on the card only where the node's own settings require signatures (then what it serves runs
# only if a trusted key signed it, wherever it comes from) and send no headers of their own (a token would go
# to whatever host the card names). Its CA stays the node's. Nor pods' DNS: a resolver the card chose would
# see, and could answer, every name the pods look up.
CARD_KEYS_WHEN_TRUSTED = frozenset({"manifest_url", "manifest_url_signature", "http_check_frequency"})


def split_card_keys(card: Mapping[str, Any], *, trusted: bool) -> tuple[dict[str, Any], list[str]]:
    """The card's values a card may set (CARD_KEYS), and the names of those it may not, sorted."""
    may_set = CARD_KEYS | CARD_KEYS_WHEN_TRUSTED if trusted else CARD_KEYS
    allowed = {key: value for key, value in card.items() if key in may_set}
    return allowed, sorted(key for key in card if key not in may_set)
