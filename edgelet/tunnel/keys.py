"""Reading the tunnel's config file as the agent does: a secret only root may read, and the key it may leave out.

Without a PrivateKey in the file, the first start generates one and keeps it
under the root dir (`tunnel/private.key`, 0600), so the device's public key,
which the hub knows it by, stays the same across restarts and upgrades.
"""

from __future__ import annotations

import base64
import functools
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from edgelet.trust import crypto
from edgelet.trust.perms import path_problem
from edgelet.tunnel.config import TunnelConfig, decode_key, parse_config
from edgelet.tunnel.errors import TunnelConfigError

KEY_FILE = Path("tunnel") / "private.key"


@dataclass(frozen=True)
class Loaded:
    config: TunnelConfig  # with its private key
    generated: bool  # the key came from (or was just written to) the root dir, not from the file

    @functools.cached_property
    def public_key(self) -> bytes:
        """Derived when asked (`edgelet check`, `peer-line`): the agent needs only the private key, and deriving
        loads the `cryptography` package, megabytes of RSS an agent that generates no key never pays."""
        assert self.config.private_key is not None
        return crypto.x25519_public(self.config.private_key)


def readable_by_others(mode: int, owner: int | None = None, me: int | None = None) -> str | None:
    """Why a secret of `mode` (owned by uid `owner`) is exposed to users other than `me` and root, or None (pure)."""
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"mode {stat.S_IMODE(mode):04o} lets other users read it (chmod 600)"
    if owner is not None and owner not in (0, me):
        return f"it belongs to uid {owner}, who may read and change it (chown root)"
    return None


def read_config(path: Path) -> TunnelConfig:
    """The parsed file, refused when others may read or write it (it may hold the private key)."""
    name = str(path)
    try:
        st = os.stat(path)
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TunnelConfigError(name, f"cannot be read ({exc})") from exc
    problem = readable_by_others(st.st_mode, st.st_uid, os.geteuid()) or path_problem(
        name, "anyone on the device could point the tunnel elsewhere"
    )
    if problem:
        raise TunnelConfigError(name, problem)
    return parse_config(text, name)


def device_key(config: TunnelConfig, root_dir: Path, *, create: bool) -> tuple[bytes, bool] | None:
    """The private key: the file's, else the one kept under `root_dir` (generated when `create`); None if none."""
    if config.private_key is not None:
        return config.private_key, False
    path = root_dir / KEY_FILE
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not create:
            return None
        return _generate(path), True
    except OSError as exc:
        raise TunnelConfigError(str(path), f"cannot be read ({exc})") from exc
    problem = readable_by_others(st.st_mode, st.st_uid, os.geteuid())
    if problem:
        raise TunnelConfigError(str(path), problem)
    try:
        return decode_key(path.read_text()), True
    except (OSError, ValueError) as exc:
        raise TunnelConfigError(
            str(path),
            f"not a WireGuard private key ({exc}): remove it to generate a new one "
            "(and give the hub the new public key)",
        ) from exc


def _generate(path: Path) -> bytes:
    key = crypto.x25519_generate()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, base64.b64encode(key) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)  # a power cut leaves the old state or the whole key, never half of one
    return key


def load(path: Path, root_dir: Path, *, create: bool = True) -> Loaded | None:
    """The config with its private key and the public key; None when it has no key and `create` is false."""
    config = read_config(path)
    found = device_key(config, root_dir, create=create)
    if found is None:
        return None
    private, generated = found
    return Loaded(replace(config, private_key=private), generated)  # decode_key made sure it has 32 bytes
