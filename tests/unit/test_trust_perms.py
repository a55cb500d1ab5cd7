"""A key or policy anyone on the device may write is refused: the rule (a table), and load_policy on real files."""

from __future__ import annotations

import json
import os

import pytest

from edgelet.trust.errors import PolicyError
from edgelet.trust.perms import file_writable_by_others, writable_by_others
from edgelet.trust.policy import load_policy


@pytest.mark.parametrize("mode, refused", [
    (0o100644, None),
    (0o100600, None),
    (0o100664, None),  # group-writable: the group is the operator's choice
    (0o100666, "the file is world-writable (mode 0666): harm"),
    (0o100602, "the file is world-writable (mode 0602): harm"),
    (0o040777, "the file is world-writable (mode 0777): harm"),
    (0o041777, "the file is world-writable (mode 1777): harm"),  # sticky (/tmp) is no exception
    (0o040755, None),
])
def test_world_writable_is_refused_with_the_mode(mode: int, refused: str | None) -> None:
    assert writable_by_others(mode, "the file", "harm") == refused


def _tree(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    from edgelet.testing.cosign import CosignKey

    key = CosignKey().write_public(keys / "cosign.pub")
    conf = tmp_path / "containers"
    conf.mkdir()
    policy = conf / "policy.json"
    policy.write_text(json.dumps({"default": [{"type": "reject"}], "transports": {"docker": {
        "registry.example/fleet": [{"type": "sigstoreSigned", "keyPaths": [str(key)]}]}}}))
    return policy, key


def test_a_world_writable_policy_or_its_directory_is_refused_naming_the_file(tmp_path) -> None:
    policy, _ = _tree(tmp_path)
    assert load_policy(policy).docker
    policy.chmod(0o666)
    with pytest.raises(PolicyError) as err:
        load_policy(policy)
    assert str(err.value) == (f"signature policy {policy}: the file is world-writable (mode 0666): anyone on the "
                              "device could change which images are accepted")
    policy.chmod(0o644)
    policy.parent.chmod(0o777)
    try:
        with pytest.raises(PolicyError, match=rf"signature policy {policy}: its directory {policy.parent} is "
                                              r"world-writable \(mode 0777\)"):
            load_policy(policy)
    finally:
        policy.parent.chmod(0o755)


def test_a_world_writable_key_file_or_its_directory_is_refused_naming_policy_field_and_key(tmp_path) -> None:
    policy, key = _tree(tmp_path)
    field = 'transports.docker["registry.example/fleet"][0].keyPaths[0]'
    key.chmod(0o646)
    with pytest.raises(PolicyError) as err:
        load_policy(policy)
    assert str(err.value) == (f"signature policy {policy} field {field}: key file {key}: the file is world-writable "
                              "(mode 0646): anyone on the device could replace the key")
    key.chmod(0o644)
    key.parent.chmod(0o757)
    try:
        with pytest.raises(PolicyError) as err:
            load_policy(policy)
        assert err.value.field == field
        assert f"field {field}: key file {key}: its directory {key.parent} is world-writable (mode 0757)" \
            in str(err.value)
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
    assert file_writable_by_others(str(key), "harm") == (f"its directory {public} is world-writable (mode 0777): "
                                                         "anyone on the device could replace the file")
    with pytest.raises(PolicyError, match=f"its directory {public} is world-writable"):
        load_policy(policy)


def test_a_missing_file_is_left_to_the_reader(tmp_path) -> None:
    assert file_writable_by_others(str(tmp_path / "absent"), "harm") is None
