"""The removal path of the runc runtime: a container killed and waited for, released once exited, removed with
its files, and a pod's containers, logs, cgroups and directory removed in the order a kill in between survives.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.cgroups import CgroupError
from edgelet.container.errors import ExecError, RuntimeError_, StopContainerError
from edgelet.runtime import bundle as bl
from edgelet.runtime import conmon, rootfs, secretspec, subpath
from edgelet.runtime.containerprep import unmount_bundle
from edgelet.runtime.layout import (
    ANN_CONTAINER_NAME,
    ANN_KIND,
    ANN_LOG_PATH,
    ANN_POD_NAME,
    ANN_POD_NAMESPACE,
    KIND_CONTAINER,
    KIND_SANDBOX,
)
from edgelet.runtime.logrotation import remove_logs, remove_pod_logs
from edgelet.runtime.podcgroups import remove_pod_cgroups
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.runtime.runc_runtime import RuncRuntime

log = get_logger("edgelet.runtime")

KILL_WAIT = 10.0  # how long SIGKILL may take to show up as an exit file
POLL = 0.05


class ContainerRemoval:
    """Kills, releases and removes the runtime's containers and pods; remembers which exited containers it has
    released already."""

    def __init__(self, host: RuncRuntime) -> None:
        self.host = host
        self.paths = host.paths
        self.clock = host.clock
        self._released: set[str] = set()  # exited containers whose runc state and rootfs mount are gone

    async def kill_and_wait(self, cid: str, bundle: Path | None) -> None:
        if await self.has_exited(cid, bundle):
            return
        try:
            # --all: every process in the container's cgroup, so processes survive neither in a pid namespace
            # shared with the sandbox (where the container's init is not pid 1) nor as re-parented orphans.
            await (await self.host.runc_of(cid)).kill(cid, "SIGKILL", all=True)
        except ExecError:
            if await self.has_exited(cid, bundle):
                return
            raise
        if not await self.wait_exit(cid, bundle, KILL_WAIT):
            raise StopContainerError(f"container {cid[:12]} did not exit {KILL_WAIT:g}s after SIGKILL")

    async def has_exited(self, cid: str, bundle: Path | None) -> bool:
        if (self.paths.exit_dir / cid).exists():
            return True
        state = await (await self.host.runc_of(cid)).state(cid)
        if state is None:
            return True
        if state.get("status") != "stopped":
            return False
        # Stopped: done once conmon has recorded it, or when there is no conmon left to record it.
        return bundle is None or not conmon.is_alive(conmon.conmon_pid(bundle))

    async def wait_exit(self, cid: str, bundle: Path | None, timeout: float) -> bool:
        deadline = self.clock.monotonic() + timeout
        exit_file = self.paths.exit_dir / cid
        checks = 0
        while True:
            if exit_file.exists():
                return True
            checks += 1
            # The exit file is the fast path; ask runc now and then in case conmon is gone.
            if checks % 10 == 0 and await self.has_exited(cid, bundle):
                return True
            if self.clock.monotonic() >= deadline:
                return await self.has_exited(cid, bundle)
            await self.clock.sleep(POLL)

    async def remove_container(self, container_id: str) -> None:
        bundle = await self.host.observer.bundle_of(container_id)
        runc = await self.host.runc_of(container_id)
        try:
            await runc.delete(container_id, force=True)
        except ExecError:
            # A container runc cannot delete while processes linger: kill everything, then retry once.
            await self.kill_and_wait(container_id, bundle)
            await runc.delete(container_id, force=True)
        crash_point("container.remove")
        if bundle is not None:
            # Let conmon record the exit of a force-deleted process before its exit file is removed.
            await self.wait_monitor_gone(bundle)
        ann = await asyncio.to_thread(bl.read_annotations, bundle)
        if ann.get(ANN_KIND) == KIND_SANDBOX:
            # A sandbox that died without stop_sandbox (a kill between its death and the DEL, a pause process
            # killed from outside) still holds its network: its bundle is the last thing that remembers it.
            await self.host.networks.detach(container_id)
            await asyncio.to_thread(self.host.release_sandbox, container_id)
        log_path = _container_log_path(ann)
        await asyncio.to_thread(self.remove_files, container_id, bundle, ann)
        if log_path is not None:
            # Container GC: a removed instance's log goes with it, rotated files too (kubelet removes
            # the log with the container). A sandbox's log is shared by its successors and stays.
            await asyncio.to_thread(remove_logs, log_path)
        self._released.discard(container_id)
        self.host.observer.forget(container_id)

    async def release_container(self, container_id: str) -> None:
        """Free what an exited container no longer needs: its runc state and cgroup (`runc delete`) and
        its overlay mount, as containerd's shim does when a task exits. The bundle (its record: exit code,
        annotations, termination message), the writable layer and the log stay until it is removed."""
        if container_id in self._released:
            return
        bundle = await self.host.observer.bundle_of(container_id)
        if bundle is None or not await self.has_exited(container_id, bundle):
            return
        if conmon.is_alive(conmon.conmon_pid(bundle)):
            return  # conmon still drains the last output; the next sync releases it
        try:
            runc = await self.host.runc_of(container_id)
            if await runc.state(container_id) is not None:
                await runc.delete(container_id, force=True)
            await asyncio.to_thread(rootfs.release_rootfs, bundle)
            # conmon is gone, so its socket entry serves nothing; the exit file stays: it is the record.
            await asyncio.to_thread((self.paths.socket_dir / container_id).unlink, missing_ok=True)
        except (RuntimeError_, OSError) as exc:
            raise RuntimeError_(f"container {container_id[:12]}: cannot release its resources: {exc}") from exc
        self._released.add(container_id)

    async def wait_monitor_gone(self, bundle: Path, timeout: float = 5.0) -> None:
        deadline = self.clock.monotonic() + timeout
        pid = conmon.conmon_pid(bundle)
        while pid and conmon.is_alive(pid) and self.clock.monotonic() < deadline:
            await self.clock.sleep(POLL)
        if pid and conmon.is_alive(pid):
            conmon.kill_conmon(bundle)

    def remove_files(self, cid: str, bundle: Path | None, ann: Mapping[str, str] | None = None) -> None:
        """`ann`: the bundle's annotations, when the caller has read them already."""
        # Exit file and socket first: a kill in between then leaves a bundle, which every relist finds and
        # the next sync removes, never an exit file nothing refers to.
        for path in (
            self.paths.exit_dir / cid,
            self.paths.socket_dir / cid,
            secretspec.spec_copy(self.paths.run_dir, cid),
        ):
            if os.path.lexists(path):
                path.unlink()
        if bundle is not None and bundle.exists():
            if ann is None:
                ann = bl.read_annotations(bundle)
            if ann.get(ANN_KIND) == KIND_CONTAINER:
                link = self.paths.container_log_link(
                    ann.get(ANN_POD_NAMESPACE, ""), ann.get(ANN_POD_NAME, ""), ann.get(ANN_CONTAINER_NAME, ""), cid
                )
                if os.path.lexists(link):
                    link.unlink()
            unmount_bundle(bundle)
            bl.remove_tree(bundle)
            # Drop the now empty containers/<name>/ dir, and with the container's last bundle its subPath mounts.
            if bundle.parent.parent.name == "containers":
                try:
                    bundle.parent.rmdir()
                except OSError:
                    pass
                else:
                    subpath.remove_container_sub_paths(bundle.parent.parent.parent, bundle.parent.name)

    async def remove_stray_files(self) -> int:
        """At start: exit files and conmon sockets of containers that neither runc nor any bundle knows
        (left by a kill in the middle of a removal by an older edgelet), and the exec scratch of an agent
        killed during an exec (its process spec holds the container's environment)."""
        observed = await self.host.observer.observe()
        known = {o.id for o in observed}

        def sweep() -> int:
            removed = 0
            for directory in (self.paths.exit_dir, self.paths.socket_dir):
                for entry in list(directory.iterdir()) if directory.is_dir() else []:
                    if entry.name not in known and not entry.name.startswith("."):
                        if entry.is_dir() and not entry.is_symlink():
                            continue
                        entry.unlink(missing_ok=True)
                        removed += 1
            for kind in self.host.sandbox_kinds:
                removed += kind.sweep(known)
            removed += self.host.execs.sweep()
            return removed

        return await asyncio.to_thread(sweep)

    async def undo_container(self, cid: str, bundle: Path, link: Path | None = None) -> None:
        """Remove a half-made container: its conmon, runc state, mounts, bundle, log link (logs stay)."""
        try:
            conmon.kill_conmon(bundle)
            await (await self.host.runc_of(cid)).delete(cid, force=True)
            await self.wait_monitor_gone(bundle, timeout=2.0)
            if link is not None and os.path.lexists(link):
                link.unlink()
            await asyncio.to_thread(self.remove_files, cid, bundle)
            self.host.observer.forget(cid)
        except (RuntimeError_, OSError) as exc:
            # The original error matters more; what is left shows in list_pods and is cleaned by the next sync.
            log.error("Cleanup after a failed create left things behind", exc, container=cid[:12], bundle=str(bundle))

    async def remove_pod(self, uid: str) -> None:
        self.host.specs.forget(uid)
        observed = await self.host.observer.observe(uid)
        # Containers before sandboxes: a container may share the sandbox's pid namespace.
        order = sorted(observed, key=lambda item: item.annotations.get(ANN_KIND) == KIND_SANDBOX)
        errors: list[str] = []
        for item in order:
            try:
                await self.remove_container(item.id)
            except (RuntimeError_, OSError) as exc:
                errors.append(f"{item.id[:12]}: {exc}")
        if errors:
            # The bundles are the only record of what is left (exit files, sockets, runc state): the pod dir
            # goes only once every container is gone, and the termination's retry finds them again.
            raise RuntimeError_(f"pod {uid}: removal incomplete: {'; '.join(errors)}")
        # The pod dir goes last: it is what makes a pod whose removal a kill interrupted an orphan for the next
        # agent, which finishes the removal; gone first, it would leave the logs and cgroups to nobody.
        try:
            # kubelet removes a removed pod's logs: its log dir and the links under containers/.
            await asyncio.to_thread(remove_pod_logs, self.paths.log_dir, uid)
        except OSError as exc:
            errors.append(f"logs: {exc}")
        try:
            for path in self.host.cgroups.candidates(uid):
                await asyncio.to_thread(remove_pod_cgroups, path)
        except CgroupError as exc:
            errors.append(str(exc))
        crash_point("pod.remove")
        if not errors:
            layout = self.host.layout(uid)
            try:
                await asyncio.to_thread(self._remove_pod_dir, layout)
            except (RuntimeError_, OSError) as exc:
                errors.append(f"{layout.dir}: {exc}")
        if errors:
            raise RuntimeError_(f"pod {uid}: removal incomplete: {'; '.join(errors)}")
        log.info("Pod removed from the runtime", uid=uid)

    def _remove_pod_dir(self, layout: bl.PodLayout) -> None:
        if not layout.dir.exists():
            return
        sid = bl.read_id(layout.sandbox_dir)
        if sid:
            self.host.release_sandbox(sid)
        for b in layout.bundles():
            unmount_bundle(b)
        subpath.remove_pod_sub_paths(layout.dir)
        bl.unmount_all_under(layout.dir)
        bl.remove_tree(layout.dir)


def _container_log_path(ann: Mapping[str, str]) -> Path | None:
    """The log path a container's bundle annotations name (None for a sandbox's)."""
    path = ann.get(ANN_LOG_PATH)
    return Path(path) if ann.get(ANN_KIND) == KIND_CONTAINER and path else None
