"""Real signing tools for tests: minisign, signify-openbsd and ssh-keygen keys and detached signatures."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("minisign", "signify-openbsd", "ssh-keygen")


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _run(argv: list[str], stdin: bytes | None = None) -> bytes:
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return done.stdout


@dataclass
class MinisignKey:
    public: Path
    secret: Path

    @classmethod
    def generate(cls, directory: Path, name: str = "minisign") -> MinisignKey:
        directory.mkdir(parents=True, exist_ok=True)
        key = cls(directory / f"{name}.pub", directory / f"{name}.key")
        _run(["minisign", "-G", "-W", "-f", "-p", str(key.public), "-s", str(key.secret)])
        return key

    def sign(
        self,
        path: Path,
        *,
        version: int | None = None,
        comment: str | None = None,
        legacy: bool = False,
        out: Path | None = None,
    ) -> Path:
        """`minisign -S` (prehashed unless `legacy`); the trusted comment is `edgelet-version: N` when given."""
        out = out or Path(str(path) + ".minisig")
        argv = ["minisign", "-S", "-s", str(self.secret), "-m", str(path), "-x", str(out)]
        if legacy:
            argv.append("-l")
        if version is not None:
            argv += ["-t", f"edgelet-version: {version}"]
        elif comment is not None:
            argv += ["-t", comment]
        _run(argv)
        return out


@dataclass
class SignifyKey:
    public: Path
    secret: Path

    @classmethod
    def generate(cls, directory: Path, name: str = "signify") -> SignifyKey:
        directory.mkdir(parents=True, exist_ok=True)
        key = cls(directory / f"{name}.pub", directory / f"{name}.sec")
        _run(["signify-openbsd", "-G", "-n", "-p", str(key.public), "-s", str(key.secret)])
        return key

    def sign(self, path: Path, *, out: Path | None = None) -> Path:
        out = out or Path(str(path) + ".minisig")
        out.unlink(missing_ok=True)
        _run(["signify-openbsd", "-S", "-s", str(self.secret), "-m", str(path), "-x", str(out)])
        return out


@dataclass
class SshKey:
    private: Path
    public_line: str  # "ssh-ed25519 AAAA..."

    @classmethod
    def generate(cls, directory: Path, name: str = "ssh") -> SshKey:
        directory.mkdir(parents=True, exist_ok=True)
        private = directory / name
        private.unlink(missing_ok=True)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(private)])
        line = " ".join(Path(str(private) + ".pub").read_text().split()[:2])
        return cls(private, line)

    def allowed_signer(self, principal: str = "ops@example", options: str = "") -> str:
        return f"{principal} {options + ' ' if options else ''}{self.public_line}\n"

    def sign(self, path: Path, *, namespace: str = "edgelet-manifest", out: Path | None = None) -> Path:
        """`ssh-keygen -Y sign -n NAMESPACE` of the file's content (through stdin, so `out` can be anywhere)."""
        out = out or Path(str(path) + ".sig")
        out.write_bytes(
            _run(["ssh-keygen", "-Y", "sign", "-q", "-f", str(self.private), "-n", namespace], stdin=path.read_bytes())
        )
        return out

    def fingerprint(self) -> str:
        text = _run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(self.private) + ".pub"]).decode()
        return text.split()[1]


def trusted_dir(directory: Path, *keys: MinisignKey | SignifyKey | SshKey, ssh_options: str = "") -> Path:
    """A `--trusted-keys` directory (0755, as the agent requires) of `keys`: each minisign or signify public key
    under its own file name, every SSH key on one `allowed_signers` (with `ssh_options`)."""
    directory.mkdir(mode=0o755)
    signers = ""
    for key in keys:
        if isinstance(key, SshKey):
            signers += key.allowed_signer(options=ssh_options)
        else:
            (directory / key.public.name).write_text(key.public.read_text())
    if signers:
        (directory / "allowed_signers").write_text(signers)
    return directory
