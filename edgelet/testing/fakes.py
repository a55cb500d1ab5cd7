"""FakeRuntime and FakeImageStore: in-memory stand-ins that record calls, for sync tests without root."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

from edgelet.container.types import ContainerRecord, ContainerState, PodRuntimeStatus, PreparedContainer, SandboxRecord
from edgelet.images.types import ImageConfig, ImageRecord

_ids = itertools.count(1)


class FakeImageStore:
    def __init__(self, refs: tuple[str, ...] = ("edgelet.local/busybox:1.36",)) -> None:
        self.records = {
            r: ImageRecord(
                id=f"sha256:{i:064x}",
                digest=f"sha256:{i + 100:064x}",
                references=(r,),
                config=ImageConfig(cmd=("sh",)),
                layers=(Path("/nonexistent"),),
            )
            for i, r in enumerate(refs)
        }

    def get(self, ref: str) -> ImageRecord | None:
        return self.records.get(ref)

    def touch(self, ref: str) -> None:
        """The ImageManager stamps each image it hands out (last used, for GC); the fake only counts them."""
        self.touched = [*getattr(self, "touched", []), ref]


class FakeRuntime:
    """Keeps sandboxes and containers in dicts; `exit(id, code)` simulates a container's death."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.sandboxes: dict[str, SandboxRecord] = {}
        self.containers: dict[str, ContainerRecord] = {}
        self.calls: list[tuple] = []
        self.released: list[str] = []
        self.fail_create: set[str] = set()  # container names whose create fails
        self.fail_start: set[str] = set()  # container names whose start fails (the instance stays created)
        self.fail_prepare: set[str] = set()  # container names whose prepare_container fails
        self.fail_sandbox = False  # run_sandbox (and create_sandbox) raises
        # create_sandbox returns sandboxes "created", their network for start_sandbox to attach (a CNI network)
        self.network = False
        self.fail_network = False  # start_sandbox raises (the sandbox stays created)
        self.prepared: dict[str, PreparedContainer] = {}  # prepared and neither created nor discarded yet
        self.prep_calls: list[tuple] = []  # prepare_container and discard_prepared (apart: `calls` is kubelet's order)

    async def list_pods(self) -> dict[str, PodRuntimeStatus]:
        uids = {s.pod_uid for s in self.sandboxes.values()} | {c.pod_uid for c in self.containers.values()}
        return {u: await self.pod_status(u) for u in uids}

    async def pod_status(self, uid: str) -> PodRuntimeStatus:
        sbs = tuple(sorted((s for s in self.sandboxes.values() if s.pod_uid == uid), key=lambda s: -s.created_at))
        cs = tuple(sorted((c for c in self.containers.values() if c.pod_uid == uid), key=lambda c: -c.created_at))
        name = ns = ""
        if sbs:
            name, ns = sbs[0].pod_name, sbs[0].pod_namespace
        return PodRuntimeStatus(uid=uid, name=name, namespace=ns, sandboxes=sbs, containers=cs)

    async def run_sandbox(self, pod, attempt: int) -> SandboxRecord:
        self.calls.append(("run_sandbox", pod.metadata.name, attempt))
        return self._new_sandbox(pod, attempt, "running")

    async def create_sandbox(self, pod, attempt: int) -> SandboxRecord:
        self.calls.append(("create_sandbox", pod.metadata.name, attempt))
        return self._new_sandbox(pod, attempt, "created" if self.network else "running")

    def _new_sandbox(self, pod, attempt: int, state: ContainerState) -> SandboxRecord:
        if self.fail_sandbox:
            raise OSError("sandbox failed")
        sid = f"sb{next(_ids)}"
        rec = SandboxRecord(
            id=sid,
            pod_uid=pod.metadata.uid,
            pod_name=pod.metadata.name,
            pod_namespace=pod.metadata.namespace,
            attempt=attempt,
            state=state,
            pid=1000 + len(self.sandboxes),
            created_at=self.clock.now() + next(_ids) * 1e-6,
        )
        self.sandboxes[sid] = rec
        return rec

    async def start_sandbox(self, pod, sandbox: SandboxRecord) -> SandboxRecord:
        self.calls.append(("start_sandbox", sandbox.id))
        if sandbox.state == "running":
            return sandbox
        if self.fail_network:
            raise OSError("network failed")
        rec = self.sandboxes[sandbox.id] = replace(self.sandboxes[sandbox.id], state="running", ips=("10.0.0.2",))
        return rec

    async def stop_sandbox(self, sandbox_id: str) -> None:
        self.calls.append(("stop_sandbox", sandbox_id))
        self.sandboxes[sandbox_id] = replace(self.sandboxes[sandbox_id], state="exited", pid=None)

    async def prepare_container(self, pod, container, image, attempt, container_type="regular") -> PreparedContainer:
        self.prep_calls.append(("prepare_container", container.name, attempt))
        if container.name in self.fail_prepare:
            raise OSError(f"prepare failed for {container.name}")
        p = PreparedContainer(
            id=f"c{next(_ids)}", pod_uid=pod.metadata.uid, name=container.name, attempt=attempt, image_id=image.id
        )
        self.prepared[p.id] = p
        return p

    async def refresh_config_volumes(self, pod) -> list[str]:  # type: ignore[no-untyped-def]
        return []

    async def discard_prepared(self, prepared: PreparedContainer) -> None:
        self.prep_calls.append(("discard_prepared", prepared.name, prepared.attempt))
        self.prepared.pop(prepared.id, None)

    async def create_container(
        self,
        pod,
        container,
        sandbox,
        image,
        attempt,
        container_type="regular",
        prepared: PreparedContainer | None = None,
    ) -> str:
        from edgelet.api.hash import container_hash

        self.calls.append(("create_container", container.name, attempt))
        if prepared is not None:
            self.prepared.pop(prepared.id, None)  # created, or undone with the failed create
        if container.name in self.fail_create:
            raise OSError(f"create failed for {container.name}")
        cid = f"c{next(_ids)}"
        self.containers[cid] = ContainerRecord(
            id=cid,
            pod_uid=pod.metadata.uid,
            pod_name=pod.metadata.name,
            pod_namespace=pod.metadata.namespace,
            name=container.name,
            attempt=attempt,
            spec_hash=container_hash(container),
            sandbox_id=sandbox.id,
            # runc's init process waits for `runc start` with a pid of its own.
            state="created",
            pid=3000 + next(_ids),
            created_at=self.clock.now() + next(_ids) * 1e-6,
            image=container.image,
            image_id=image.id,
            container_type=container_type,
            grace_period=float(pod.spec.termination_grace_period_seconds)
            if pod.spec.termination_grace_period_seconds is not None
            else 30.0,
        )
        return cid

    async def start_container(self, container_id: str) -> None:
        self.calls.append(("start_container", container_id))
        c = self.containers[container_id]
        if c.name in self.fail_start:
            raise OSError(f"start failed for {c.name}")
        self.containers[container_id] = replace(c, state="running", pid=2000 + next(_ids), started_at=self.clock.now())

    def exit(self, container_id: str, code: int) -> None:
        c = self.containers[container_id]
        self.containers[container_id] = replace(
            c,
            state="exited",
            pid=None,
            exit_code=code,
            finished_at=self.clock.now(),
            reason="Completed" if code == 0 else "Error",
        )

    async def stop_container(self, container_id: str, grace: float, signal: str = "SIGTERM") -> None:
        self.calls.append(("stop_container", container_id, grace, signal))
        if self.containers.get(container_id, None) is not None and self.containers[container_id].state != "exited":
            self.exit(container_id, 137)

    async def remove_container(self, container_id: str) -> None:
        self.calls.append(("remove_container", container_id))
        self.containers.pop(container_id, None)
        self.sandboxes.pop(container_id, None)

    async def release_container(self, container_id: str) -> None:
        # Kept apart from `calls`: every sync releases exited containers, and tests assert on the rest.
        self.released.append(container_id)

    async def remove_pod(self, uid: str) -> None:
        self.calls.append(("remove_pod", uid))
        for k in [k for k, s in self.sandboxes.items() if s.pod_uid == uid]:
            del self.sandboxes[k]
        for k in [k for k, c in self.containers.items() if c.pod_uid == uid]:
            del self.containers[k]

    def running(self, uid: str | None = None) -> list[ContainerRecord]:
        return [c for c in self.containers.values() if c.state == "running" and (uid is None or c.pod_uid == uid)]
