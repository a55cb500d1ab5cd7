"""The runc + conmon implementation of `edgelet.container.Runtime`: bundles, sandboxes, rootfs, state from runc."""
