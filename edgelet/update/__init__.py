"""edgelet updating itself: signed releases staged beside the running one, a trial, a commit or a rollback.

`release` is the artifact (a tar.xz of the frozen one-dir with its
`release.json`: version, architecture, file digests) and how it is built and
unpacked; `decide` holds every decision as a pure function (is a release
acceptable, what the launcher does at a start, is a trial committed);
`store` keeps the trial record, the history and the pods' snapshot under the
state directory; `stage` unpacks, verifies and swaps the `current` symlink;
`manager` watches the card and the URL and carries it all out in the agent.
The counting of starts and the fallback after too many live in
`packaging/launch`, a POSIX sh script that never changes with a release.
"""

from __future__ import annotations

# The SSH signature namespace of a release (`ssh-keygen -Y sign -n edgelet-release`): a manifest's or an image
# archive's signature cannot be replayed as a release's.
RELEASE_NAMESPACE = "edgelet-release"

RELEASE_JSON = "release.json"
ARCHIVE_SUFFIX = ".tar.xz"
# Under the releases directory: what staging and downloading write before a release is whole, so that the agent's
# start can tell what a kill or a power cut left (stage.remove_interrupted).
PARTIAL_SUFFIX = ".partial"  # `.<version>.partial/`, a release being unpacked
DOWNLOAD_DIR = ".download"  # `--update-url`'s archive and signature
PART_SUFFIX = ".part"  # `.<name>.part`, a file being downloaded
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_TRIAL_DEADLINE = 120.0
