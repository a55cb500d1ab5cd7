"""Kubernetes API types and the manifest -> static pod pipeline.

Modules (imported individually, so `import edgelet.api.types` stays cheap):
types (generated msgspec Structs), decode (parse_manifests), defaults
(apply_defaults), validation (validate_pod), static (make_static_pod),
hash (container_hash, pod_full_name), errors (ApiError and subclasses).
"""
