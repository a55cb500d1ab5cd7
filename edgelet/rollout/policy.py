"""A pod's rollout policy: the node's flags, overridden by the pod's annotations (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from edgelet.api.annotations import ROLLOUT, ROLLOUT_DEADLINE, ROLLOUT_STABILITY_WINDOW, ROLLOUT_STRATEGY
from edgelet.api.annotations import ROLLOUT_OFF as _OFF
from edgelet.api.annotations import ROLLOUT_ON as _ON
from edgelet.rollout.decide import Policy, Strategy
from edgelet.util.duration import parse_duration


def policy_for(annotations: Mapping[str, str], node: Policy, *, enabled: bool) -> tuple[Policy | None, list[str]]:
    """The pod's policy, None when rollout is off for it (kubelet's kill-and-start), and what was ignored and why."""
    problems: list[str] = []
    raw = annotations.get(ROLLOUT)
    if raw is not None:
        low = raw.strip().lower()
        if low in _OFF:
            return None, problems
        if low in _ON:
            enabled = True
        else:
            problems.append(f'annotation {ROLLOUT}: expected "on" or "off", got {raw!r}; using the node default')
    if not enabled:
        return None, problems
    deadline, window = node.deadline, node.window
    for key, current in ((ROLLOUT_DEADLINE, deadline), (ROLLOUT_STABILITY_WINDOW, window)):
        text = annotations.get(key)
        if text is None:
            continue
        try:
            value = parse_duration(text)
        except ValueError as exc:
            problems.append(f"annotation {key}: {exc}; using {current:g}s")
            continue
        if key == ROLLOUT_DEADLINE:
            if value <= 0:
                problems.append(f"annotation {key}: must be positive; using {current:g}s")
                continue
            deadline = value
        else:
            window = max(0.0, value)
    strategy: Strategy = node.strategy
    raw = annotations.get(ROLLOUT_STRATEGY)
    if raw is not None:
        if raw.strip().lower() == "surge":
            strategy = "Surge"
        elif raw.strip().lower() == "replace":
            strategy = "Replace"
        else:
            problems.append(
                f'annotation {ROLLOUT_STRATEGY}: expected "Replace" or "Surge", got {raw!r}; using {node.strategy}'
            )
    return Policy(deadline=deadline, window=window, rollback=node.rollback, strategy=strategy), problems


__all__ = ["policy_for"]
