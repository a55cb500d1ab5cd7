"""edgelet: a standalone kubelet for edge devices (static pods on runc and conmon)."""

__version__ = "0.1.0"

# A frozen build (build.spec) bundles a generated top-level module with the git
# commit it was built from; a source checkout has none and reports "dev".
try:
    from _edgelet_build import BUILD_COMMIT
except ImportError:
    BUILD_COMMIT = "dev"
