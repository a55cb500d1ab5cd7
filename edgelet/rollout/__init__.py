"""Health-gated rollout of a changed static pod: the pure state machine (decide) and its crash-safe record (record)."""
