"""edgelet: a standalone kubelet for edge devices (static pods on runc and conmon)."""

__version__ = "0.1.0"
