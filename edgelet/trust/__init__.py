"""Trusted delivery: the keys a device trusts and the signatures manifests, archives and registry images must carry.

Nothing here imports a cryptography library at import time: `crypto`, the
only module that uses the `cryptography` package, imports it in its
verification functions, so an agent that verifies nothing never loads it.
`keys` reads the key files, `minisign` and `sshsig` parse and check the
two signature formats, `verify` picks the format and applies the keys, and
`versions` keeps the highest signed version accepted per source (no replay).
`policy` reads containers-policy.json(5) and decides purely which requirement
an image reference meets; `cosign` checks cosign's key-based signatures.
`perms` is the one rule both key files and policies obey: nothing anyone may write.
"""

from __future__ import annotations

# SSH signature namespaces (`ssh-keygen -Y sign -n ...`): a signature made for one use cannot be
# replayed as the other (an image archive's signature is no manifest's).
MANIFEST_NAMESPACE = "edgelet-manifest"
ARCHIVE_NAMESPACE = "edgelet-image"

# Detached signature files beside a manifest or archive, in the order they are looked for.
SIGNATURE_SUFFIXES = (".minisig", ".sig")
