"""`edgelet tunnel peer-line`: the [Peer] block an operator adds to the hub's WireGuard config for this device."""

from __future__ import annotations

import argparse
import socket
from typing import TextIO

from edgelet.cli.common import EXIT_OK, CommandError
from edgelet.settings import Settings


def cmd_tunnel(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from edgelet.tunnel import keys
    from edgelet.tunnel.config import peer_block

    if settings.wireguard_config is None:
        raise CommandError("no tunnel configured: give --wireguard-config FILE (or wireguard_config in the config)")
    # The key the agent will use: the file's, the one kept under --root-dir, or one generated and kept now, so
    # the hub can know the device before its first start.
    loaded = keys.load(settings.wireguard_config, settings.root_dir, create=True)
    assert loaded is not None
    node = settings.hostname_override or socket.gethostname()
    print(peer_block(loaded.public_key, loaded.config, node), file=out, end="")
    return EXIT_OK
