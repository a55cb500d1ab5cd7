"""The WireGuard tunnel a device dials out on, so that the hub (and the apiserver behind it) reaches it behind NAT.

`config` parses wg-quick's file format (pure), `keys` reads that file as the
agent does (permissions, the generated private key), `uapi` speaks the
cross-platform configuration protocol to a WireGuard device, and `device`
brings the interface up with wireguard-go and keeps it configured.
"""
