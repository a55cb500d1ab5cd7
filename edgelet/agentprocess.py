"""The agent's own process: its name, its tie to a one-file build's bootloader, how it waits for its children,
and its hard exits (a stop that cannot finish, the end of --runonce)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from edgelet.util.log import get_logger

log = get_logger("edgelet")


def set_process_name() -> None:
    """The kernel's name of the process (ps, top, systemd's journal): edgelet, not python3."""
    try:
        import prctl

        prctl.set_name("edgelet")
    except (ImportError, OSError):
        pass


def die_with_bootloader() -> None:
    """One-file build: never outlive the PyInstaller bootloader, our parent.

    systemd sees the bootloader as the unit's main process, and with
    KillMode=process its SIGKILL (stop timeout, watchdog) reaches only the
    bootloader: this agent would otherwise keep running beside the restarted
    one. The one-dir build and a source checkout run as one process.
    """
    meipass = getattr(sys, "_MEIPASS", None)
    if meipass is None or not os.path.basename(meipass).startswith("_MEI"):
        return
    try:
        import prctl

        prctl.set_pdeathsig(signal.SIGKILL)
    except (ImportError, OSError) as exc:
        log.warning("Cannot tie edgelet to its bootloader", err=str(exc))
        return
    if os.getppid() == 1:  # the bootloader died before the line above
        os.kill(os.getpid(), signal.SIGKILL)


def wait_children_by_pidfd() -> None:
    """Python 3.11 waits for each subprocess in a thread of its own; a pidfd in the loop is what 3.12 does."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel before 5.3, or a seccomp filter that refuses it
        return
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


def exit_if_stuck(timeout: float) -> None:
    """Exit anyway when shutting down takes longer than `timeout` (a thread stuck in a syscall, say).

    Stopping edgelet never stops a pod and every state is rebuilt from runc at the next start,
    so a hard exit loses nothing; a stop that never finishes would make systemd SIGKILL us
    after TimeoutStopSec instead, and an upgrade wait for it.
    """
    import threading

    def expire() -> None:
        stuck = [t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
        log.warning("Shutdown is taking too long; exiting now", timeout=timeout, threads=",".join(stuck) or None)
        logging_flush()
        os._exit(0)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()


def exit_now(rc: int) -> None:
    """End --runonce without the interpreter's teardown (collecting every module's objects, a tenth of a second
    or more on a board): its work is done and written, its loop and threads have ended, its containers run
    under their own conmon. The boot waits for this exit (edgelet-runonce.service), so the process ends here."""
    logging_flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)


def logging_flush() -> None:
    import logging

    for handler in logging.getLogger().handlers:
        handler.flush()
