"""`edgelet exec` against a real agent: runc exec through the local socket, with and without a terminal,
stdin, exit codes, and the container's env, user, cwd and confinement."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios

import pytest

from tests.e2e.conftest import IMAGE, AgentProc, edgelet_command, shared_agent, wait_for

pytestmark = pytest.mark.privileged

# main records its own confinement at start, so an exec can compare with it; `done` exits at once and stays
# terminated (restartPolicy Never) while the pod keeps running.
POD = f"""apiVersion: v1
kind: Pod
metadata:
  name: shell
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "grep -E '^(Seccomp|CapEff|CapBnd|NoNewPrivs):' /proc/self/status > /tmp/status; exec sleep 300"]
    workingDir: /tmp
    env:
    - name: GREETING
      value: hello
    securityContext:
      runAsUser: 1000
      runAsGroup: 1001
  - name: done
    image: {IMAGE}
    command: ["true"]
"""


def exec_argv(agent, *args: str) -> list[str]:
    """`edgelet exec` on the agent's dirs; `args` are exec's own (options, POD, --, COMMAND...)."""
    return [
        *edgelet_command(),
        "exec",
        "--root-dir",
        str(agent.paths.root_dir),
        "--run-dir",
        str(agent.paths.run_dir),
        "--config",
        "/dev/null",
        *args,
    ]


def run_exec(agent, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        exec_argv(agent, *args),
        input=input,
        capture_output=True,
        timeout=60,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def start_shell(agent) -> AgentProc:
    """The agent started with the shell pod, once main runs (its confinement recorded) and done has exited."""
    agent.start()
    agent.write_manifest("shell.yaml", POD)

    def ready() -> bool:
        row = agent.pod("shell") or {}
        statuses = {c["name"]: c for c in ((row.get("pod") or {}).get("status") or {}).get("containerStatuses") or []}
        return "running" in statuses.get("main", {}).get("state", {}) and "terminated" in statuses.get("done", {}).get(
            "state", {}
        )

    wait_for(ready, timeout=90, what="main running and done terminated")
    # main has written its confinement once this file is in (exec sees it as the container does).
    wait_for(
        lambda: run_exec(agent, "shell", "--", "cat", "/tmp/status").stdout, timeout=30, what="main's recorded status"
    )
    return agent


# One agent and pod per handler for the whole module: every test only execs into main, which they leave as
# they found it (a command a test starts ends with it).
@pytest.fixture(scope="module")
def shell(tmp_path_factory, busybox_archive):
    with shared_agent(tmp_path_factory, busybox_archive) as agent:
        yield start_shell(agent)


@pytest.fixture(scope="module")
def crun_shell(tmp_path_factory, busybox_archive, crun_ready):
    with shared_agent(tmp_path_factory, busybox_archive, "crun") as agent:
        yield start_shell(agent)


def test_exec_without_tty_exit_code_and_streams(shell):
    done = run_exec(shell, "shell", "-c", "main", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert done.returncode == 7
    assert done.stdout == b"out\n" and done.stderr == b"err\n"
    # Without -c, the first container, said on stderr as kubectl does.
    assert run_exec(shell, "shell", "--", "true").stderr == b'Defaulted container "main" out of: main, done\n'

    # No terminal without -t, and none with -t when stdin is no terminal (a warning says so, as kubectl's).
    assert run_exec(shell, "shell", "--", "busybox", "tty").stdout == b"not a tty\n"
    warned = run_exec(shell, "-it", "shell", "--", "busybox", "tty", input=b"")
    assert warned.stdout == b"not a tty\n" and b"Unable to use a TTY" in warned.stderr


def test_exec_stdin_piped(shell):
    data = b"".join(b"line %d\n" % i for i in range(2000))
    done = run_exec(shell, "-i", "shell", "-c", "main", "--", "cat", input=data)
    assert done.returncode == 0 and done.stdout == data
    # Without -i the command's stdin is empty.
    assert run_exec(shell, "shell", "--", "sh", "-c", "cat; echo end").stdout == b"end\n"


def test_exec_runs_as_the_container(shell):
    done = run_exec(shell, "shell", "--", "sh", "-c", "echo $GREETING; id -u; id -g; pwd")
    assert done.stdout.decode().split() == ["hello", "1000", "1001", "/tmp"]
    recorded = run_exec(shell, "shell", "--", "cat", "/tmp/status").stdout
    mine = run_exec(
        shell, "shell", "--", "grep", "-E", "^(Seccomp|CapEff|CapBnd|NoNewPrivs):", "/proc/self/status"
    ).stdout
    assert b"Seccomp:\t2" in recorded  # RuntimeDefault: a filter is on
    assert mine == recorded


def test_exec_errors_name_pod_and_container(shell):
    missing = run_exec(shell, "shell", "-c", "nope", "--", "true")
    assert missing.returncode == 1
    assert b"container 'nope' not found in pod default/shell-testnode" in missing.stderr
    stopped = run_exec(shell, "shell", "-c", "done", "--", "true")
    assert stopped.returncode == 1
    assert b"container 'done' in pod default/shell-testnode is not running (terminated: Completed)" in stopped.stderr
    assert b'pods "ghost" not found' in run_exec(shell, "ghost", "--", "true").stderr
    assert run_exec(shell, "shell").returncode == 2  # no command


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Terminal:
    """The CLI on a pty's slave side; the test reads and types on the master."""

    def __init__(self, argv: list[str]) -> None:
        self.master, slave = pty.openpty()
        _set_size(slave, 33, 101)
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        self.output = b""

    def _read_once(self, timeout: float) -> bool:
        """Read what is there; False when nothing came in `timeout` or every slave descriptor is closed."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every slave descriptor is closed
            return False
        self.output += data
        return bool(data)

    def read(self, timeout: float = 0.2) -> bytes:
        self._read_once(timeout)
        return self.output

    def close(self) -> int:
        code = self.proc.wait(timeout=60)
        while self._read_once(0.2):
            pass
        os.close(self.master)
        return code


def test_exec_with_tty_and_resize(runtime_handler, request):
    shell = request.getfixturevalue("shell" if runtime_handler == "runc" else "crun_shell")
    term = Terminal(
        exec_argv(
            shell,
            "-i",
            "-t",
            "shell",
            "--",
            "sh",
            "-c",
            "busybox tty; echo TERM=$TERM; busybox stty size; "
            'while read x; do [ "$x" = quit ] && exit 3; busybox stty size; done',
        )
    )
    try:

        def sized() -> bool:
            if b"33 101" in term.read():
                return True
            if runtime_handler == "crun" and b"TERM=" in term.output:
                # crun sets the spec's size after it let the command go (docs/runtime-handlers.md): the first
                # `stty size` may come first and print 0 0; the loop prints the size again for every line.
                os.write(term.master, b"again\r")
            return False

        try:
            wait_for(sized, timeout=30, what="the pty sized as the client's terminal")
        except AssertionError as e:
            raise AssertionError(f"{e}; the terminal showed {term.output!r}") from None
        assert b"/dev/pts/" in term.output and b"TERM=xterm" in term.output
        # A resize of the client's terminal reaches the container's pty (SIGWINCH forwarded to runc).
        _set_size(term.master, 40, 120)
        term.proc.send_signal(signal.SIGWINCH)

        def resized() -> bool:
            os.write(term.master, b"again\r")
            return b"40 120" in term.read(0.5)

        wait_for(resized, timeout=30, what="the resized pty")
        os.write(term.master, b"quit\r")
        assert term.close() == 3
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait()


def test_signals_are_forwarded_and_a_vanished_client_kills_its_command(shell):
    # SIGINT to the CLI reaches the command (no TTY: the terminal would send ^C as a byte instead).
    with subprocess.Popen(
        exec_argv(
            shell,
            "shell",
            "-c",
            "main",
            "--",
            "sh",
            "-c",
            'trap "exit 42" INT; echo ready; while :; do sleep 0.1; done',
        ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    ) as proc:
        try:
            assert proc.stdout.readline() == b"ready\n"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 42
        finally:
            if proc.poll() is None:
                proc.kill()
    # A client killed outright: the agent kills its command in the container.
    with subprocess.Popen(
        exec_argv(shell, "shell", "-c", "main", "--", "sh", "-c", "echo ready; exec sleep 1234"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    ) as proc:
        assert proc.stdout.readline() == b"ready\n"
        assert b"sleep 1234" in run_exec(shell, "shell", "-c", "main", "--", "ps").stdout
        proc.kill()
    wait_for(
        lambda: b"sleep 1234" not in run_exec(shell, "shell", "-c", "main", "--", "ps").stdout,
        timeout=60,
        what="the orphaned command killed",
    )
