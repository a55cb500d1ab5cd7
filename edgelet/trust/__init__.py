"""Trusted delivery: what edgelet accepts only with a valid signature (registry image policy, cosign)."""
