"""The pure parts of `edgelet exec`: the process spec, the protocol's lines, routing, container choice, TTY."""

from __future__ import annotations

import fcntl
import os
import struct
import termios

import pytest

from edgelet.api.types import (
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    PodStatus,
)
from edgelet.cli.exec import command_of, decide_tty, exec_target
from edgelet.runtime.execsession import ExecSessionError, build_exec_process, terminal_size
from edgelet.server.exectarget import pick_container, pick_pod, running_container_id
from edgelet.server.routes import HttpError, match_route
from edgelet.streaming import execproto as proto

PROCESS = {
    "terminal": False,
    "user": {"uid": 1000, "gid": 1001, "additionalGids": [5]},
    "args": ["sleep", "300"],
    "env": ["PATH=/bin", "GREETING=hello"],
    "cwd": "/tmp",
    "noNewPrivileges": True,
    "capabilities": {"bounding": ["CAP_CHOWN"], "effective": []},
    "apparmorProfile": "cri-default",
    "oomScoreAdj": 999,
    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
    "consoleSize": {"height": 1, "width": 1},
}


@pytest.mark.parametrize(
    "tty, env",
    [
        (False, ["PATH=/bin", "GREETING=hello"]),
        (True, ["PATH=/bin", "GREETING=hello", "TERM=xterm"]),
    ],
)
def test_build_exec_process_keeps_the_containers_confinement(tty, env):
    spec = build_exec_process(PROCESS, ["sh", "-c", "id"], tty=tty)
    assert spec["args"] == ["sh", "-c", "id"] and spec["terminal"] is tty and spec["env"] == env
    for key in ("user", "cwd", "noNewPrivileges", "capabilities", "apparmorProfile", "oomScoreAdj", "rlimits"):
        assert spec[key] == PROCESS[key]
    assert "consoleSize" not in spec
    assert PROCESS["args"] == ["sleep", "300"] and "consoleSize" in PROCESS  # the bundle's copy is untouched


@pytest.mark.parametrize(
    "tty, size, console",
    [
        (True, (111, 33), {"width": 111, "height": 33}),  # runc sizes the pty before the command starts
        (True, None, None),  # no size known: none, not the container's
        (True, (0, 0), None),  # a client terminal without a size yet
        (True, (80, 0), None),
        (False, (111, 33), None),  # no terminal, no console
    ],
)
def test_build_exec_process_gives_the_clients_terminal_size(tty, size, console):
    spec = build_exec_process(PROCESS, ["sh"], tty=tty, size=size)
    assert spec.get("consoleSize") == console


def test_terminal_size_reads_a_pty_and_is_none_for_a_pipe():
    master, slave = os.openpty()
    r, w = os.pipe()
    try:
        assert terminal_size(slave) == (0, 0)  # a fresh pty has no size
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
        assert terminal_size(slave) == (111, 33)
        assert terminal_size(r) is None
    finally:
        for fd in (master, slave, r, w):
            os.close(fd)


def test_build_exec_process_keeps_a_given_term_and_needs_a_command():
    assert build_exec_process({**PROCESS, "env": ["TERM=vt100"]}, ["sh"], tty=True)["env"] == ["TERM=vt100"]
    with pytest.raises(ExecSessionError):
        build_exec_process(PROCESS, [], tty=False)


@pytest.mark.parametrize(
    "message, line",
    [
        (proto.Message(signal=28), b'{"signal":28}\n'),
        (proto.Message(exit=7), b'{"exit":7}\n'),
        (proto.Message(error="no"), b'{"error":"no"}\n'),
        (
            proto.Hello(command=["sh", "-c", "exit 7"], tty=True, stdin=True),
            b'{"command":["sh","-c","exit 7"],"tty":true,"stdin":true}\n',
        ),
    ],
)
def test_protocol_lines(message, line):
    assert proto.encode(message) == line
    decoded = proto.decode_hello(line) if isinstance(message, proto.Hello) else proto.decode_message(line)
    assert decoded == message


@pytest.mark.parametrize(
    "line", [b"{", b"[]", b'{"exit":"7"}', b'{"exit":true}', b'{"exit":1,"signal":2}', b'{"kill":9}']
)
def test_bad_messages(line):
    with pytest.raises(proto.ProtocolError):
        proto.decode_message(line)


@pytest.mark.parametrize("line", [b'{"command":[]}', b'{"command":"sh"}', b'{"command":["sh"],"x":1}'])
def test_bad_hellos(line):
    with pytest.raises(proto.ProtocolError):
        proto.decode_hello(line)


def test_line_buffer_splits_and_bounds():
    buf = proto.LineBuffer()
    assert buf.feed(b'{"exit"') == []
    assert buf.feed(b':0}\n\n{"signal":2}\n{"sig') == [b'{"exit":0}', b'{"signal":2}']
    with pytest.raises(proto.ProtocolError):
        buf.feed(b"x" * (proto.MAX_LINE + 1))


def test_exec_route_is_post_only():
    route = match_route("POST", "/exec/web?namespace=default&container=main")
    assert route.endpoint == "exec" and route.params == {"pod": "web"}
    assert route.query == {"namespace": "default", "container": "main"}
    with pytest.raises(HttpError) as err:
        match_route("GET", "/exec/web")
    assert err.value.status == 405
    with pytest.raises(HttpError) as err:
        match_route("POST", "/exec/default/web/main")
    assert err.value.status == 400


@pytest.mark.parametrize(
    "pod, namespace, container, target",
    [
        ("web", None, None, "/exec/web"),
        ("web", "kube-system", None, "/exec/web?namespace=kube-system"),
        ("a/b", None, "c d", "/exec/a%2Fb?container=c+d"),
    ],
)
def test_exec_target(pod, namespace, container, target):
    assert exec_target(pod, namespace, container) == target


PODS = [("default", "web-node", 1), ("default", "db", 2), ("other", "db", 3), ("other", "web", 4)]


@pytest.mark.parametrize(
    "name, namespace, expected",
    [
        ("web", "default", 1),
        ("web-node", None, 1),
        ("web", "other", 4),
        ("web", None, 'pods "web" exist in several namespaces (default, other): name one with -n'),
        ("db", "default", 2),
        ("db", "other", 3),
        ("ghost", None, 'pods "ghost" not found'),
        ("db", "third", 'pods "db" not found'),
        ("db", None, 'pods "db" exist in several namespaces (default, other): name one with -n'),
    ],
)
def test_pick_pod(name, namespace, expected):
    if isinstance(expected, int):
        assert pick_pod(PODS, name, namespace, "node") == expected
        return
    with pytest.raises(HttpError) as err:
        pick_pod(PODS, name, namespace, "node")
    assert err.value.message == expected


def _status(state: ContainerState, name: str = "main") -> PodStatus:
    return PodStatus(
        container_statuses=[
            ContainerStatus(
                name=name, image="i", image_id="", ready=False, restart_count=0, container_id="runc://abc", state=state
            )
        ]
    )


@pytest.mark.parametrize(
    "state, error",
    [
        (ContainerState(running=ContainerStateRunning()), None),
        (
            ContainerState(waiting=ContainerStateWaiting(reason="CrashLoopBackOff")),
            "not running (waiting: CrashLoopBackOff)",
        ),
        (
            ContainerState(terminated=ContainerStateTerminated(exit_code=0, reason="Completed")),
            "not running (terminated: Completed)",
        ),
        (ContainerState(terminated=ContainerStateTerminated(exit_code=3)), "not running (terminated: exit code 3)"),
    ],
)
def test_running_container_id(state, error):
    if error is None:
        assert running_container_id(_status(state), "main", "default/p") == "abc"
        return
    with pytest.raises(HttpError) as err:
        running_container_id(_status(state), "main", "default/p")
    assert err.value.status == 409 and f"container 'main' in pod default/p is {error}" == err.value.message


@pytest.mark.parametrize(
    "tty, stdin, isatty, expected",
    [
        (False, False, True, (False, None)),
        (True, True, True, (True, None)),
        (True, False, True, (False, "Unable to use a TTY - input is not connected (add -i)")),
        (True, True, False, (False, "Unable to use a TTY - input is not a terminal or the right kind of file")),
    ],
)
def test_decide_tty(tty, stdin, isatty, expected):
    assert decide_tty(tty, stdin, isatty) == expected


def test_pick_container_and_command():
    assert pick_container(["main"], None, "default/p") == ("main", None)
    assert pick_container(["a", "b"], None, "default/p") == ("a", 'Defaulted container "a" out of: a, b')
    assert pick_container(["a", "b"], "b", "default/p") == ("b", None)
    with pytest.raises(HttpError, match="container 'c' not found in pod default/p"):
        pick_container(["a", "b"], "c", "default/p")
    assert command_of(["--", "sh", "--"]) == ["sh", "--"] and command_of(["ls"]) == ["ls"]


@pytest.mark.parametrize("method, target", [("GET", "/exec/p"), ("POST", "/exec/p")])
def test_the_node_api_exec_is_kubelets_not_the_local_sockets(method, target):
    """The node API serves kubelet's /exec/{ns}/{pod}/{container} (kubectl exec over SPDY, streaming/remoteexec.py);
    the local socket's short /exec/{pod} is not a node API path."""
    from edgelet.server.nodeapi import match_node_route

    with pytest.raises(HttpError) as err:
        match_node_route(method, target)
    assert err.value.status == 400
    assert match_node_route("POST", "/exec/default/p/c?command=true").endpoint == "exec"
