"""A dependency-free sd_notify client: tells systemd READY=1, STATUS=, WATCHDOG=1 and EXTEND_TIMEOUT_USEC= over
$NOTIFY_SOCKET.

Use it once at start, before any subprocess is spawned:

    notifier = Notifier.from_environ()      # reads and UNSETS the systemd variables
    ...
    notifier.progress()                     # any thread, at each step of the start that moves (extends the start)
    notifier.ready("3 pods running")        # once the agent has adopted and synced
    notifier.status("syncing 2 pods")       # any time; shown by `systemctl status`
    notifier.watchdog()                     # at least every watchdog_interval / 2
    notifier.stopping()                     # on SIGTERM

Outside systemd every call is a no-op returning False. A failure to reach
systemd is logged once and never raised from these calls: a broken notify
socket must not stop the agent (systemd's own timeouts deal with it).
`Notifier.send` is the raising primitive underneath.

Why the start is extended by progress: the unit's TimeoutStartSec= is short,
so that a release that hangs before READY=1 is killed (and, on trial, rolled
back) in minutes; a first start that imports large image archives takes
longer than that on slow flash, and stays alive by telling systemd it moves
(EXTEND_TIMEOUT_USEC=, systemd 236 and later: systemd then waits until
max(its own start timeout, the message + the extension)). A step that shows
no progress for `START_WINDOW` is a hang, and systemd's timeout takes it.

Why the variables are unset: runc reads NOTIFY_SOCKET too. Inherited by
`runc start`, it makes runc proxy the socket into the container and block
until the *container* sends READY=1, which an ordinary workload never does.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from collections.abc import MutableMapping
from typing import TYPE_CHECKING

from edgelet.errors import EdgeletError
from edgelet.util.clock import REAL_CLOCK
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.util.clock import Clock

log = get_logger("edgelet.sdnotify")

NOTIFY_SOCKET = "NOTIFY_SOCKET"
WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"
SYSTEMD_VARIABLES = (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID)
# How long a step of the start may go without progress before systemd's start timeout may kill it: each progress
# asks systemd for this much more time. Long enough for one unmarked step (adopting, a layer's unpacking) on slow
# flash; short enough that a start hung early is killed within minutes, not after a ten-minute timeout.
START_WINDOW = 90.0


class NotifyError(EdgeletError):
    """A notification could not be delivered; names the socket and the message."""

    def __init__(self, message: str, *, address: str, state: str) -> None:
        super().__init__(message)
        self.address = address
        self.state = state


def parse_notify_address(value: str) -> str:
    """$NOTIFY_SOCKET -> an AF_UNIX address: a path as is, `@name` -> abstract `\\0name`.

    Raises ValueError for anything else (systemd 254+ also allows `vsock:`,
    which only matters inside VMs and is not supported here).
    """
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    raise ValueError(f"unsupported NOTIFY_SOCKET {value!r}: expected an absolute path or @abstract-name")


def parse_watchdog_interval(watchdog_usec: str | None, watchdog_pid: str | None, pid: int, ppid: int) -> float | None:
    """sd_watchdog_enabled: the watchdog timeout in seconds, or None when it is not for this process.

    Deliberately wider than libsystemd, which wants WATCHDOG_PID == getpid():
    the parent pid is accepted too, because in the PyInstaller one-file build
    systemd's main PID is the bootloader and the agent runs as its child.
    """
    if not watchdog_usec:
        return None
    try:
        usec = int(watchdog_usec)
    except ValueError:
        return None
    if usec <= 0:
        return None
    if watchdog_pid:
        try:
            owner = int(watchdog_pid)
        except ValueError:
            return None
        if owner not in (pid, ppid):
            return None
    return usec / 1_000_000


def compute_start_extension(now: float, granted_until: float, window: float, *, ready: bool) -> float | None:
    """The EXTEND_TIMEOUT_USEC= (seconds) to send at a start's progress at `now`, or None (pure).

    `granted_until` is when the last extension sent runs out (-inf before any). After READY=1 nothing is sent:
    systemd would extend the watchdog too, and hide a hang from it. Otherwise the start is given `window` more
    from now, once that gains at least a quarter window: at most four datagrams per window, and a hang is still
    killed between 3/4 and 1 window after its last progress.
    """
    if ready or window <= 0:
        return None
    if now + window - granted_until < window / 4:
        return None
    return window


def format_state(fields: dict[str, str]) -> str:
    """`{"READY": "1", "STATUS": "x"}` -> `READY=1\\nSTATUS=x`; values are kept to one line each."""
    lines = []
    for key, value in fields.items():
        if not key or "=" in key or "\n" in key:
            raise ValueError(f"invalid sd_notify field name {key!r}")
        lines.append(f"{key}={' '.join(str(value).splitlines())}")
    return "\n".join(lines)


class Notifier:
    """Sends sd_notify messages to one socket; disabled (every call a no-op) when there is none."""

    def __init__(
        self,
        address: str | None = None,
        *,
        watchdog_interval: float | None = None,
        start_window: float = START_WINDOW,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self.address = address
        self.watchdog_interval = watchdog_interval
        self.start_window = start_window
        self._clock = clock
        self._warned = False
        # progress() is called from worker threads (an image import) as well as the event loop.
        self._lock = threading.Lock()
        self._granted_until = -math.inf
        self._ready = False

    @classmethod
    def from_environ(
        cls, environ: MutableMapping[str, str] | None = None, *, unset: bool = True, start_window: float = START_WINDOW
    ) -> Notifier:
        """The notifier systemd configured through the environment (os.environ by default).

        With `unset` (the default) the variables are removed from `environ`,
        as sd_notify(unset_environment=1) does, so that no child (runc,
        conmon, hooks) inherits them. A malformed NOTIFY_SOCKET is logged
        and yields a disabled notifier.
        """
        env = os.environ if environ is None else environ
        raw = env.get(NOTIFY_SOCKET)
        interval = parse_watchdog_interval(env.get(WATCHDOG_USEC), env.get(WATCHDOG_PID), os.getpid(), os.getppid())
        if unset:
            for name in SYSTEMD_VARIABLES:
                env.pop(name, None)
        address = None
        if raw:
            try:
                address = parse_notify_address(raw)
            except ValueError as exc:
                log.warning("Ignoring NOTIFY_SOCKET", err=str(exc))
        return cls(address, watchdog_interval=interval if address else None, start_window=start_window)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str) -> bool:
        """Send one message (`send(READY="1", STATUS="up")`); False when disabled; NotifyError on failure."""
        if self.address is None:
            return False
        state = format_state(fields)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # Non-blocking: a wedged systemd must not stall the event loop; the send is then lost.
                sock.setblocking(False)
                sock.sendto(state.encode(), self.address)
        except OSError as exc:
            shown = "@" + self.address[1:] if self.address.startswith("\0") else self.address
            raise NotifyError(
                f"sd_notify to {shown} failed: {exc.strerror or exc}", address=shown, state=state
            ) from exc
        return True

    def _send_quietly(self, **fields: str) -> bool:
        try:
            return self.send(**fields)
        except NotifyError as exc:
            if not self._warned:
                self._warned = True  # once: the watchdog would repeat it every few seconds
                log.warning("Cannot notify systemd", socket=exc.address, err=str(exc))
            return False

    def ready(self, status: str | None = None) -> bool:
        """READY=1: startup is complete (Type=notify units are "active" from here)."""
        with self._lock:
            self._ready = True
        fields = {"READY": "1"}
        if status:
            fields["STATUS"] = status
        return self._send_quietly(**fields)

    def progress(self) -> bool:
        """The start moved (thread-safe): systemd's start timeout is extended by `start_window` when that is due
        (`compute_start_extension`). True when a message was sent."""
        if self.address is None:
            return False
        with self._lock:
            now = self._clock.monotonic()
            extension = compute_start_extension(now, self._granted_until, self.start_window, ready=self._ready)
            if extension is None:
                return False
            self._granted_until = now + extension
        return self._send_quietly(EXTEND_TIMEOUT_USEC=str(int(extension * 1_000_000)))

    def stopping(self, status: str | None = None) -> bool:
        """STOPPING=1: shutdown has begun."""
        fields = {"STOPPING": "1"}
        if status:
            fields["STATUS"] = status
        return self._send_quietly(**fields)

    def status(self, text: str) -> bool:
        """STATUS=: a one-line description shown by `systemctl status`."""
        return self._send_quietly(STATUS=text)

    def watchdog(self) -> bool:
        """WATCHDOG=1: the keep-alive ping for WatchdogSec=."""
        return self._send_quietly(WATCHDOG="1")

    async def run_watchdog(self, clock: Clock) -> None:
        """Ping WATCHDOG=1 every half interval until cancelled; returns at once when there is no watchdog.

        This proves only that the event loop turns; a caller that wants it to
        prove more (the sync loop ticks) calls `watchdog()` from there instead.
        """
        if not self.enabled or not self.watchdog_interval:
            return
        period = self.watchdog_interval / 2
        while True:
            self.watchdog()
            await clock.sleep(period)


def pods_summary(entries) -> str:
    """systemd's STATUS= line: `3 pods: 2 running, 1 waiting (CrashLoopBackOff)`."""
    running = waiting = failed = done = 0
    reasons: set[str] = set()
    for e in entries:
        phase, status = e.row.phase, e.row.status
        if phase == "Failed":
            failed += 1
        elif phase == "Succeeded":
            done += 1
        elif phase == "Running" and status == "Running":
            running += 1
        else:
            waiting += 1
            if status not in ("Running", "Pending", "ContainerCreating", "PodInitializing"):
                reasons.add(status)
    parts = [f"{running} running"]
    if waiting:
        parts.append(f"{waiting} waiting" + (f" ({', '.join(sorted(reasons))})" if reasons else ""))
    if failed:
        parts.append(f"{failed} failed")
    if done:
        parts.append(f"{done} completed")
    total = running + waiting + failed + done
    return f"{total} pod{'s' if total != 1 else ''}: " + ", ".join(parts)
