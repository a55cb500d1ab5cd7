"""Table tests of $(VAR) expansion, the container env, env merging and kubelet's command rule."""

import pytest

from edgelet.api.types import (
    Container,
    EnvVar,
    EnvVarSource,
    ObjectFieldSelector,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceFieldSelector,
    ResourceRequirements,
    SecretKeySelector,
)
from edgelet.ocispec.env import EnvError, container_env, expand, merge_env, process_args

VARS = {"A": "1", "B": "two", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        ("$(A)", "1"),
        ("x$(A)y$(B)z", "x1ytwoz"),
        ("$(EMPTY)", ""),
        ("$(UNKNOWN)", "$(UNKNOWN)"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$1"),
        ("$$", "$"),
        ("$", "$"),
        ("a$", "a$"),
        ("$A", "$A"),
        ("$(A", "$(A"),
        ("$(A$(B)", "$(A$(B)"),  # the name runs to the first ")": "A$(B", unknown, kept
        ("$()", "$()"),
        ("100$", "100$"),
        ("ünï$(B)", "ünïtwo"),
    ],
)
def test_expand(text, expected):
    assert expand(text, VARS.get) == expected


@pytest.mark.parametrize(
    ("command", "args", "entrypoint", "cmd", "expected"),
    [
        (["sh"], ["-c", "x"], ["/ep"], ["c"], ["sh", "-c", "x"]),
        (["sh"], None, ["/ep"], ["c"], ["sh"]),  # command set: image Cmd ignored
        (None, ["a"], ["/ep", "-v"], ["c"], ["/ep", "-v", "a"]),
        (None, None, ["/ep"], ["c", "d"], ["/ep", "c", "d"]),
        ([], [], [], ["c"], ["c"]),
        (None, None, [""], ["c"], ["c"]),  # entrypoint reset to [""]
        (None, ["a"], [], [], ["a"]),
    ],
)
def test_process_args(command, args, entrypoint, cmd, expected):
    assert process_args(command, args, entrypoint, cmd) == expected


def test_process_args_empty_is_an_error():
    with pytest.raises(EnvError, match="no command specified"):
        process_args(None, None, (), ())


@pytest.mark.parametrize(
    ("base", "overrides", "expected"),
    [
        (["PATH=/a", "H=h"], ["PATH=/b"], ["PATH=/b", "H=h"]),
        (["A=1"], ["B=2", "A=3", "B=4"], ["A=3", "B=4"]),
        ([], ["X=", "Y=a=b"], ["X=", "Y=a=b"]),
    ],
)
def test_merge_env(base, overrides, expected):
    assert merge_env(base, overrides) == expected


def _pod(container):
    return Pod(
        metadata=ObjectMeta(name="web", namespace="prod", uid="u-1", labels={"app": "x"}, annotations={"a/b": "c"}),
        spec=PodSpec(containers=[container], node_name="edge1"),
    )


def test_container_env_order_expansion_and_field_refs():
    c = Container(
        name="c",
        env=[
            EnvVar(name="A", value="1"),
            EnvVar(name="B", value="$(A)-$(C)"),  # C not yet defined: left as is
            EnvVar(name="C", value="3"),
            EnvVar(name="A", value="$(A)$(A)"),  # redefinition keeps the first position
            EnvVar(name="NAME", value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="metadata.name"))),
            EnvVar(name="NS", value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="metadata.namespace"))),
            EnvVar(
                name="APP", value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="metadata.labels['app']"))
            ),
            EnvVar(
                name="ANN",
                value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="metadata.annotations['a/b']")),
            ),
            EnvVar(name="NODE", value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="spec.nodeName"))),
            EnvVar(name="IP", value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="status.podIP"))),
            EnvVar(name="IPS", value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="status.podIPs"))),
            EnvVar(name="E"),
        ],
    )
    env = container_env(_pod(c), c, pod_ips=("10.0.0.5", "fd00::5"))
    assert env == [
        ("A", "11"),
        ("B", "1-$(C)"),
        ("C", "3"),
        ("NAME", "web"),
        ("NS", "prod"),
        ("APP", "x"),
        ("ANN", "c"),
        ("NODE", "edge1"),
        ("IP", "10.0.0.5"),
        ("IPS", "10.0.0.5,fd00::5"),
        ("E", ""),
    ]


@pytest.mark.parametrize(
    ("resource", "divisor", "limits", "requests", "allocatable", "expected"),
    [
        ("limits.cpu", None, {"cpu": "250m"}, None, {}, "1"),
        ("limits.cpu", "1m", {"cpu": "250m"}, None, {}, "250"),
        ("requests.cpu", "1m", None, {"cpu": "100m"}, {}, "100"),
        ("limits.memory", "1Mi", {"memory": "128Mi"}, None, {}, "128"),
        ("limits.memory", None, None, None, {"memory": "1Gi"}, str(2**30)),
        ("limits.cpu", None, None, None, {"cpu": "4"}, "4"),
        ("requests.memory", None, {"memory": "64Mi"}, None, {}, str(64 * 2**20)),  # request defaults to limit
    ],
)
def test_resource_field_ref(resource, divisor, limits, requests, allocatable, expected):
    c = Container(
        name="c",
        resources=ResourceRequirements(limits=limits, requests=requests),
        env=[
            EnvVar(
                name="V",
                value_from=EnvVarSource(resource_field_ref=ResourceFieldSelector(resource=resource, divisor=divisor)),
            )
        ],
    )
    assert container_env(_pod(c), c, node_allocatable=allocatable) == [("V", expected)]


@pytest.mark.parametrize(
    "var",
    [
        EnvVar(name="S", value_from=EnvVarSource(secret_key_ref=SecretKeySelector(key="k", name="s"))),
        EnvVar(name="F", value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="spec.nope"))),
        EnvVar(
            name="R", value_from=EnvVarSource(resource_field_ref=ResourceFieldSelector(resource="limits.memory"))
        ),  # no limit, no allocatable
    ],
)
def test_container_env_errors(var):
    c = Container(name="c", env=[var])
    with pytest.raises(EnvError):
        container_env(_pod(c), c)
