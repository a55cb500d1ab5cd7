"""systemd's part in running edgelet, played by a thread for tests and benches: Restart=always, Type=notify's
start timeout, WatchdogSec=, KillMode=process and $INVOCATION_ID around one command (the launcher).

Each start gets a fresh notify socket (abstract namespace). A start that sends no READY=1 within
`start_timeout`, or a ready one silent for `watchdog` seconds, is killed (SIGKILL for the first, SIGABRT for
the second, as systemd does) and started again after `restart_sec`; only the main process is signalled, so
the conmon monitors it left behind keep the pods running, as under the real unit. EXTEND_TIMEOUT_USEC= before
READY=1 moves the start's deadline as systemd does: to the extension after the message, if that is later.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Start:
    """One start of the command: how it ended (`rc`, and why it was killed, if it was)."""

    ready: bool = False
    rc: int | None = None
    killed: str = ""
    extensions: int = 0  # EXTEND_TIMEOUT_USEC= messages received before READY=1
    notes: list[str] = field(default_factory=list)


class ServiceLoop:
    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        log_path: Path,
        start_timeout: float = 60.0,
        watchdog: float = 0.0,
        restart_sec: float = 0.2,
        crash_env: dict[str, str] | None = None,
    ) -> None:
        self.argv = argv
        self.env = env
        # Added to the environment until a start ends by SIGKILL (a crash point fired): the starts after it
        # run clean, as the device after a power cut.
        self.crash_env = dict(crash_env or {})
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.watchdog = watchdog
        self.restart_sec = restart_sec
        self.starts: list[Start] = []
        self._stopping = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, name="serviceloop", daemon=True)

    def start(self) -> ServiceLoop:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """`systemctl stop`: SIGTERM to the main process, no restart; SIGKILL if it does not exit in time."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._thread.join(timeout)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the running main process (a crash, the OOM killer); the loop starts it again."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)

    @property
    def pid(self) -> int | None:
        """The running main process's pid (the launcher's, then what it execs), or None between starts."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def ready_starts(self) -> int:
        return sum(1 for s in self.starts if s.ready)

    def _run(self) -> None:
        with open(self.log_path, "ab") as log:
            while not self._stopping.is_set():
                self._once(log)
                if self._stopping.wait(self.restart_sec):
                    break

    def _once(self, log: object) -> None:
        name = f"edgelet-serviceloop-{uuid.uuid4().hex}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind("\0" + name)
        sock.settimeout(0.2)
        crashed = any(s.rc == -signal.SIGKILL and not s.killed for s in self.starts)
        # $INVOCATION_ID as systemd sets it for each start of a unit: `edgelet update rollback` restarts only such.
        env = {
            **self.env,
            **({} if crashed else self.crash_env),
            "NOTIFY_SOCKET": "@" + name,
            "INVOCATION_ID": uuid.uuid4().hex,
        }
        if self.watchdog:
            env["WATCHDOG_USEC"] = str(int(self.watchdog * 1_000_000))
        this = Start()
        self.starts.append(this)
        try:
            proc = subprocess.Popen(self.argv, env=env, stdout=log, stderr=subprocess.STDOUT)  # type: ignore[call-overload]
            self._proc = proc
            started = last_ping = time.monotonic()
            deadline = started + self.start_timeout
            while proc.poll() is None:
                try:
                    lines = sock.recv(4096).decode(errors="replace").splitlines()
                except TimeoutError:
                    lines = []
                now = time.monotonic()
                if "READY=1" in lines:
                    this.ready, last_ping = True, now
                if "WATCHDOG=1" in lines:
                    last_ping = now
                extension = extend_timeout_usec(lines)
                if extension is not None and not this.ready:
                    this.extensions += 1
                    deadline = max(deadline, now + extension / 1_000_000)  # never shortened, as systemd's timer
                if self._stopping.is_set():
                    continue
                if not this.ready and now > deadline:
                    this.killed = "start timeout"
                    os.kill(proc.pid, signal.SIGKILL)
                elif this.ready and self.watchdog and now - last_ping > self.watchdog:
                    this.killed = "watchdog"
                    os.kill(proc.pid, signal.SIGABRT)
            this.rc = proc.wait()
        finally:
            sock.close()


def extend_timeout_usec(lines: list[str]) -> int | None:
    """The last EXTEND_TIMEOUT_USEC= of one notify datagram's lines, or None."""
    found = None
    for line in lines:
        key, _, value = line.partition("=")
        if key == "EXTEND_TIMEOUT_USEC" and value.isdigit():
            found = int(value)
    return found
