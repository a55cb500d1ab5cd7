"""Loading `--trusted-keys`: minisign/signify Ed25519 public keys and OpenSSH allowed_signers lines.

A key file may hold any mix of:

- minisign or signify public keys: the base64 line of a `.pub` file (`RW...`), its
  `untrusted comment:` line is skipped. Both tools share the binary layout
  `"Ed" || key id (8 bytes) || Ed25519 public key (32 bytes)`;
- OpenSSH allowed_signers lines (ssh-keygen(1) ALLOWED SIGNERS):
  `principals [options] ssh-ed25519 BASE64 [comment]` with the options
  `namespaces="..."`, `valid-after="..."`, `valid-before="..."`. Only Ed25519 keys;
  `cert-authority` is refused (certificates are not supported).

Blank lines and `#` comments are skipped. A key file or directory that any
user may write, or that cannot be read or parsed, is an error naming the file
and line: the device would otherwise trust whoever can write there. Parsing
needs no cryptography library (keys are bytes here; `verify` loads them).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import fnmatch
import hashlib
import os
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from edgelet.trust.errors import KeyFileError
from edgelet.trust.perms import mode_problem, path_problem

ED25519_KEY_BYTES = 32
_MINISIGN_ALG = b"Ed"
SSH_ED25519 = "ssh-ed25519"
MAX_KEY_FILE_BYTES = 1024 * 1024
MAX_KEY_FILES = 1000


@dataclass(frozen=True)
class Ed25519Key:
    """A minisign/signify public key: its 8-byte key id (as stored) and the raw Ed25519 key."""

    keynum: bytes
    public: bytes
    origin: str  # file:line, for messages

    @property
    def key_id(self) -> str:
        return minisign_key_id(self.keynum)


@dataclass(frozen=True)
class SshKey:
    """An allowed_signers entry: principals, the Ed25519 key, its namespaces and validity window (UTC seconds)."""

    principals: str
    public: bytes
    namespaces: tuple[str, ...] | None = None  # None: every namespace
    valid_after: float | None = None
    valid_before: float | None = None
    origin: str = ""

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(ssh_public_blob(self.public)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    @property
    def key_id(self) -> str:
        return f"{self.principals} {self.fingerprint}"

    def allows_namespace(self, namespace: str) -> bool:
        if self.namespaces is None:
            return True
        return match_pattern_list(namespace, self.namespaces)

    def validity_problem(self, now: float) -> str | None:
        """Why the key is not valid at `now` (wall time), or None."""
        if self.valid_after is not None and now < self.valid_after:
            return f"key not valid before {format_time(self.valid_after)}"
        if self.valid_before is not None and now >= self.valid_before:
            return f"key expired at {format_time(self.valid_before)}"
        return None


@dataclass(frozen=True)
class TrustedKeys:
    """Every trusted key, looked up by minisign key id or by SSH public key bytes."""

    ed25519: tuple[Ed25519Key, ...] = ()
    ssh: tuple[SshKey, ...] = ()
    path: str = ""

    def by_keynum(self, keynum: bytes) -> list[Ed25519Key]:
        return [k for k in self.ed25519 if k.keynum == keynum]

    def by_ssh_key(self, public: bytes) -> list[SshKey]:
        return [k for k in self.ssh if k.public == public]

    def __len__(self) -> int:
        return len(self.ed25519) + len(self.ssh)


def minisign_key_id(keynum: bytes) -> str:
    """A key id as minisign prints it: the 8 bytes as a little-endian number in hex, no zero padding."""
    return format(int.from_bytes(keynum, "little"), "X")


def format_time(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def ssh_public_blob(public: bytes) -> bytes:
    """The SSH wire form of an Ed25519 public key (what `ssh-ed25519 BASE64` encodes)."""
    return ssh_string(SSH_ED25519.encode()) + ssh_string(public)


def parse_ssh_public_blob(blob: bytes) -> bytes:
    """The raw Ed25519 key of an SSH public key blob; ValueError for any other key or a malformed blob."""
    from edgelet.trust.sshsig import Reader

    reader = Reader(blob)
    kind = reader.string()
    if kind != SSH_ED25519.encode():
        raise ValueError(f"unsupported key type {kind.decode('ascii', 'replace')!r} (only {SSH_ED25519})")
    public = reader.string()
    reader.end()
    if len(public) != ED25519_KEY_BYTES:
        raise ValueError(f"Ed25519 key of {len(public)} bytes")
    return public


def match_pattern_list(value: str, patterns: tuple[str, ...]) -> bool:
    """OpenSSH pattern-list semantics: `*`/`?` wildcards, a `!` pattern that matches vetoes."""
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if fnmatch.fnmatchcase(value, pattern[1:] if negated else pattern):
            if negated:
                return False
            matched = True
    return matched


def parse_ssh_time(text: str) -> float:
    """ssh-keygen's YYYYMMDD[HHMM[SS]][Z]; without Z it is the system's local time, as ssh-keygen reads it."""
    utc = text.endswith(("Z", "z"))
    digits = text[:-1] if utc else text
    if not digits.isdigit() or len(digits) not in (8, 12, 14):
        raise ValueError(f"time {text!r} is not YYYYMMDD[HHMM[SS]][Z]")
    fields = [
        int(digits[0:4]),
        int(digits[4:6]),
        int(digits[6:8]),
        int(digits[8:10] or 0),
        int(digits[10:12] or 0),
        int(digits[12:14] or 0),
    ]
    try:
        parsed = time.strptime(" ".join(str(f) for f in fields), "%Y %m %d %H %M %S")
    except ValueError as exc:
        raise ValueError(f"time {text!r} is not a valid date") from exc
    return float(calendar.timegm(parsed) if utc else time.mktime(parsed))


def parse_minisign_key(text: str) -> tuple[bytes, bytes]:
    """(keynum, public key) of a minisign/signify base64 key line; ValueError when it is none."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64") from exc
    if len(raw) != 2 + 8 + ED25519_KEY_BYTES:
        raise ValueError(f"key of {len(raw)} bytes, expected {2 + 8 + ED25519_KEY_BYTES}")
    if raw[:2] != _MINISIGN_ALG:
        raise ValueError(f"unsupported key algorithm {raw[:2]!r}")
    return raw[2:10], raw[10:]


def _fields(line: str) -> list[str]:
    """Split on blanks outside double quotes (allowed_signers options may quote commas and blanks)."""
    out: list[str] = []
    current: list[str] = []
    quoted = False
    for ch in line:
        if ch == '"':
            quoted = not quoted
            current.append(ch)
        elif ch in " \t" and not quoted:
            if current:
                out.append("".join(current))
                current = []
        else:
            current.append(ch)
    if quoted:
        raise ValueError("unterminated quote")
    if current:
        out.append("".join(current))
    return out


def _options(text: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    for part in parts:
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if not name:
            raise ValueError(f"empty option in {text!r}")
        if sep:
            if len(value) < 2 or not (value.startswith('"') and value.endswith('"')):
                raise ValueError(f"option {name} needs a quoted value")
            out[name] = value[1:-1]
        else:
            out[name] = None
    return out


def parse_allowed_signer(line: str, origin: str) -> SshKey:
    """One allowed_signers line; ValueError names what is wrong with it."""
    fields = _fields(line)
    if len(fields) < 3:
        raise ValueError("expected `principals [options] ssh-ed25519 BASE64`")
    principals, rest = fields[0], fields[1:]
    options: dict[str, str | None] = {}
    if not rest[0].startswith(("ssh-", "ecdsa-", "sk-")):
        options = _options(rest[0])
        rest = rest[1:]
    if len(rest) < 2:
        raise ValueError("expected a key type and a base64 key after the principals and options")
    keytype, key_b64 = rest[0], rest[1]
    if keytype != SSH_ED25519:
        raise ValueError(f"unsupported key type {keytype!r} (only {SSH_ED25519})")
    namespaces: tuple[str, ...] | None = None
    after = before = None
    for name, value in options.items():
        if name == "namespaces":
            namespaces = tuple(p.strip() for p in (value or "").split(",") if p.strip())
            if not namespaces:
                raise ValueError("namespaces= is empty")
        elif name == "valid-after":
            after = parse_ssh_time(value or "")
        elif name == "valid-before":
            before = parse_ssh_time(value or "")
        elif name == "cert-authority":
            raise ValueError("cert-authority is not supported (certificates are not)")
        else:
            raise ValueError(f"unknown option {name!r}")
    try:
        blob = base64.b64decode(key_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("the key is not base64") from exc
    try:
        public = parse_ssh_public_blob(blob)
    except ValueError as exc:
        raise ValueError(f"the key: {exc}") from exc
    return SshKey(
        principals=principals,
        public=public,
        namespaces=namespaces,
        valid_after=after,
        valid_before=before,
        origin=origin,
    )


def parse_key_text(text: str, name: str) -> tuple[list[Ed25519Key], list[SshKey]]:
    """Every key of one file's text; KeyFileError names the file and line of the first bad line."""
    ed: list[Ed25519Key] = []
    ssh: list[SshKey] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line.lower().startswith("untrusted comment:"):
            continue
        origin = f"{name}:{number}"
        try:
            if " " not in line and "\t" not in line:
                keynum, public = parse_minisign_key(line)
                ed.append(Ed25519Key(keynum=keynum, public=public, origin=origin))
            else:
                ssh.append(parse_allowed_signer(line, origin))
        except (ValueError, IndexError) as exc:
            raise KeyFileError(name, str(exc) or type(exc).__name__, number) from exc
    return ed, ssh


_ADD_A_KEY = "whoever can write it could add a key"


def load_trusted_keys(path: Path) -> TrustedKeys:
    """Read `--trusted-keys`: one file, or every non-hidden regular file of a directory (sorted by name).

    Raises KeyFileError for a path that is missing, unreadable, writable by anyone but root (the file, the
    directory, a file in it or a directory above: edgelet.trust.perms), malformed, or holds no key.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise KeyFileError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    files: list[Path]
    is_dir = stat.S_ISDIR(st.st_mode)
    problem = path_problem(str(path), _ADD_A_KEY, what="the directory" if is_dir else "the file")
    if problem:
        raise KeyFileError(str(path), problem)
    if is_dir:
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            raise KeyFileError(str(path), f"cannot list: {exc.strerror or exc}") from exc
        files = [path / n for n in names if not n.startswith(".")][:MAX_KEY_FILES]
    else:
        files = [path]
    ed: list[Ed25519Key] = []
    ssh: list[SshKey] = []
    for file in files:
        try:
            fst = os.stat(file)
        except OSError as exc:
            raise KeyFileError(str(file), f"cannot read: {exc.strerror or exc}") from exc
        if stat.S_ISDIR(fst.st_mode):
            continue  # a subdirectory (an editor's backup dir) holds no keys of ours
        if not stat.S_ISREG(fst.st_mode):
            raise KeyFileError(str(file), "not a regular file")
        problem = mode_problem(fst, "the file", _ADD_A_KEY, euid=os.geteuid())
        if problem:
            raise KeyFileError(str(file), problem)
        if fst.st_size > MAX_KEY_FILE_BYTES:
            raise KeyFileError(str(file), f"larger than {MAX_KEY_FILE_BYTES} bytes")
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise KeyFileError(str(file), f"cannot read: {exc.strerror or exc}") from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KeyFileError(str(file), "not UTF-8 text") from exc
        more_ed, more_ssh = parse_key_text(text, str(file))
        ed += more_ed
        ssh += more_ssh
    keys = TrustedKeys(ed25519=tuple(ed), ssh=tuple(ssh), path=str(path))
    if not len(keys):
        raise KeyFileError(str(path), "holds no key")
    return keys
