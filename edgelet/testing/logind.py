"""A stand-in systemd-logind on a D-Bus of the test's own: Inhibit, InhibitDelayMaxUSec, PrepareForShutdown.

The test machines have no logind (no systemd as init), so the graceful
shutdown test starts `dbus-daemon` on a socket in its temp dir and this
module as a process on it: `python -m edgelet.testing.logind ADDRESS`. Lines
on stdin drive it ("shutdown", "cancel"); it reports on stdout ("ready",
"inhibited", "released") so the test can follow the lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

LOGIND = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"
DELAY_MAX_USEC = 30_000_000

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"""


def start_bus(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A private dbus-daemon; (its process, its address)."""
    conf = directory / "bus.conf"
    socket = directory / "bus.sock"
    conf.write_text(BUS_CONFIG.format(socket=socket))
    proc = subprocess.Popen(
        ["dbus-daemon", "--nofork", "--nopidfile", f"--config-file={conf}", "--print-address"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    address = proc.stdout.readline().decode().strip()
    if not address:
        proc.kill()
        raise RuntimeError(f"dbus-daemon did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
    return proc, address


def _serve(address: str) -> None:
    from jeepney import DBusAddress, MessageType, new_method_return, new_signal
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    conn = open_dbus_connection(bus=address, enable_fds=True)
    conn.send_and_get_reply(message_bus.RequestName(LOGIND))
    manager = DBusAddress(PATH, interface=MANAGER)
    send_lock = threading.Lock()

    def say(text: str) -> None:
        print(text, flush=True)

    def watch(read_end: int) -> None:
        while os.read(read_end, 1):
            pass
        os.close(read_end)
        say("released")

    def control() -> None:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd in ("shutdown", "cancel"):
                with send_lock:
                    conn.send(new_signal(manager, "PrepareForShutdown", "b", (cmd == "shutdown",)))
        os._exit(0)

    threading.Thread(target=control, daemon=True).start()
    say("ready")
    while True:
        msg = conn.receive()
        if msg.header.message_type != MessageType.method_call:
            continue
        member = msg.header.fields.get(3)  # HeaderFields.member
        if member == "Inhibit":
            r, w = os.pipe()
            with send_lock:
                conn.send(new_method_return(msg, "h", (w,)))
            os.close(w)
            threading.Thread(target=watch, args=(r,), daemon=True).start()
            say("inhibited")
        elif member == "Get":
            with send_lock:
                conn.send(new_method_return(msg, "v", (("t", DELAY_MAX_USEC),)))


if __name__ == "__main__":
    _serve(sys.argv[1])
