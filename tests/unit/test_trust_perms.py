"""A key or policy anyone on the device may write is refused: the rule (a table), and load_policy on real files."""

from __future__ import annotations

import json
import os

import pytest

from edgelet.trust.errors import PolicyError
from edgelet.trust.perms import mode_problem, path_problem
from edgelet.trust.policy import load_policy


def _stat(mode: int, uid: int = 0) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    "mode, uid, sticky_ok, refused",
    [
        (0o100644, 0, False, None),
        (0o100600, 0, False, None),
        (0o100644, 1000, False, None),  # the user edgelet runs as (euid 1000 here)
        (0o100664, 0, False, "the file is group-writable (mode 0664): harm"),  # as sshd's StrictModes
        (0o100666, 0, False, "the file is world-writable (mode 0666): harm"),
        (0o100602, 0, False, "the file is world-writable (mode 0602): harm"),
        (0o100644, 65534, False, "the file is owned by uid 65534, not root: harm"),
        (0o040777, 0, False, "the file is world-writable (mode 0777): harm"),
        (0o041777, 0, False, "the file is world-writable (mode 1777): harm"),  # sticky: not for the file's own dir
        (0o041777, 0, True, None),  # a root-owned sticky directory above it (/tmp): entries cannot be swapped
        (0o041777, 1000, True, "the file is world-writable (mode 1777): harm"),  # sticky but not root's
        (0o040775, 0, True, "the file is group-writable (mode 0775): harm"),
        (0o040755, 0, False, None),
    ],
)
def test_strict_modes_table(mode: int, uid: int, sticky_ok: bool, refused: str | None) -> None:
    assert mode_problem(_stat(mode, uid), "the file", "harm", euid=1000, sticky_ok=sticky_ok) == refused


def test_every_directory_up_to_the_root_is_checked(tmp_path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    key = deep / "key.pub"
    key.write_text("k\n")
    assert path_problem(str(key), "harm") is None
    (tmp_path / "a").chmod(0o777)  # two levels up, not sticky: b could be renamed away and replaced
    try:
        assert path_problem(str(key), "harm") == (
            f"the directory {tmp_path / 'a'} above it is world-writable "
            "(mode 0777): anyone who can write it could replace the file"
        )
    finally:
        (tmp_path / "a").chmod(0o755)
    os.chown(deep, 65534, 65534)
    assert path_problem(str(key), "harm") == (
        f"its directory {deep} is owned by uid 65534, not root: anyone who can write it could replace the file"
    )
    os.chown(deep, 0, 0)
    link = tmp_path / "link.pub"  # named through a symlink: the real file's directories count too
    link.symlink_to(key)
    deep.chmod(0o770)
    assert "group-writable" in (path_problem(str(link), "harm") or "")
    deep.chmod(0o755)


def _tree(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    from edgelet.testing.cosign import CosignKey

    key = CosignKey().write_public(keys / "cosign.pub")
    conf = tmp_path / "containers"
    conf.mkdir()
    policy = conf / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "default": [{"type": "reject"}],
                "transports": {
                    "docker": {"registry.example/fleet": [{"type": "sigstoreSigned", "keyPaths": [str(key)]}]}
                },
            }
        )
    )
    return policy, key


def test_a_world_writable_policy_or_its_directory_is_refused_naming_the_file(tmp_path) -> None:
    policy, _ = _tree(tmp_path)
    assert load_policy(policy).docker
    policy.chmod(0o666)
    with pytest.raises(PolicyError) as err:
        load_policy(policy)
    assert str(err.value) == (
        f"signature policy {policy}: the file is world-writable (mode 0666): anyone on the "
        "device could change which images are accepted"
    )
    policy.chmod(0o644)
    policy.parent.chmod(0o777)
    try:
        with pytest.raises(
            PolicyError,
            match=rf"signature policy {policy}: its directory {policy.parent} is "
            r"world-writable \(mode 0777\)",
        ):
            load_policy(policy)
    finally:
        policy.parent.chmod(0o755)


def test_a_world_writable_key_file_or_its_directory_is_refused_naming_policy_field_and_key(tmp_path) -> None:
    policy, key = _tree(tmp_path)
    field = 'transports.docker["registry.example/fleet"][0].keyPaths[0]'
    key.chmod(0o646)
    with pytest.raises(PolicyError) as err:
        load_policy(policy)
    assert str(err.value) == (
        f"signature policy {policy} field {field}: key file {key}: the file is world-writable "
        "(mode 0646): anyone on the device could replace the key"
    )
    key.chmod(0o644)
    key.parent.chmod(0o757)
    try:
        with pytest.raises(PolicyError) as err:
            load_policy(policy)
        assert err.value.field == field
        assert f"field {field}: key file {key}: its directory {key.parent} is world-writable (mode 0757)" in str(
            err.value
        )
    finally:
        key.parent.chmod(0o755)
    assert load_policy(policy).docker


def test_a_key_reached_through_a_symlink_is_judged_where_it_lives(tmp_path) -> None:
    policy, key = _tree(tmp_path)
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o777)
    real = public / "cosign.pub"
    key.rename(real)
    os.symlink(real, key)
    assert path_problem(str(key), "harm") == (
        f"its directory {public} is world-writable (mode 0777): anyone who can write it could replace the file"
    )
    with pytest.raises(PolicyError, match=f"its directory {public} is world-writable"):
        load_policy(policy)


def test_a_missing_file_is_left_to_the_reader(tmp_path) -> None:
    assert path_problem(str(tmp_path / "absent"), "harm") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_policy_or_key_file_not_roots_or_group_writable_is_refused(tmp_path) -> None:
    policy, key = _tree(tmp_path)
    os.chown(policy, 65534, 65534)
    with pytest.raises(PolicyError, match=f"signature policy {policy}: the file is owned by uid 65534, not root"):
        load_policy(policy)
    os.chown(policy, 0, 0)
    key.chmod(0o664)
    with pytest.raises(PolicyError, match=rf"key file {key}: the file is group-writable \(mode 0664\)"):
        load_policy(policy)
    key.chmod(0o644)
    assert load_policy(policy).docker
