"""`edgelet images` list, import, pull, rm and prune on the local image store."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from edgelet.cli import common
from edgelet.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    PROG,
    format_age,
    format_size,
    format_table,
    is_expected_error,
)
from edgelet.cli.progress import with_progress
from edgelet.settings import Settings

if TYPE_CHECKING:
    from edgelet.images.types import ImageRecord


def images_table(records: Sequence[ImageRecord], now: float) -> str:
    """REFERENCE, DIGEST (the manifest's: `name@digest` pins it), SIZE, PINNED, LAST USED (a container
    created from it; "never" when none was). An image without a name shows `<none>`: `images rm DIGEST`."""
    rows = [["REFERENCE", "DIGEST", "SIZE", "PINNED", "LAST USED"]]
    for r in sorted(records, key=lambda r: (r.references or ("~",), r.id)):
        last = float(r.extra.get("last_used", 0) or 0)
        used = f"{format_age(now - last)} ago" if last > 0 else "never"
        for ref in r.references or ("<none>",):
            rows.append([ref, r.digest, format_size(r.size), "true" if r.pinned else "false", used])
    return format_table(rows)


def _is_tty(out: TextIO) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty is not None and isatty())


def image_store(settings: Settings) -> Any:
    from edgelet.images.store import ImageStore

    return ImageStore(settings.images_dir)


def cmd_images(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if getattr(args, "images_command", None) == "import":
        return cmd_images_import(settings, args, out, err)
    if getattr(args, "images_command", None) in ("pull", "rm", "prune"):
        return cmd_images_change(settings, args, out, err)
    if not (settings.images_dir).is_dir():
        records: list[ImageRecord] = []  # a read-only command creates no store
    else:
        records = image_store(settings).list()
    print(images_table(records, common.clock.now()), file=out)
    return EXIT_OK


def cmd_images_change(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`images pull REF`, `images rm REF...`, `images prune` (unused, unpinned images, whatever the disk usage)."""
    import asyncio

    store = image_store(settings)
    if args.images_command == "pull":
        from edgelet.images.auth import credential_paths, load_credentials
        from edgelet.images.puller import Puller
        from edgelet.trust.policy import load_optional_policy

        puller = Puller(
            store,
            registries=dict(settings.registries),
            credentials=load_credentials(credential_paths(settings.image_credential_file)),
            signature_policy=load_optional_policy(settings.signature_policy),
        )
        started = common.clock.monotonic()
        r = with_progress(lambda progress: puller.pull_sync(args.reference, progress=progress), out, tty=_is_tty(out))
        print(
            f"Pulled {', '.join(r.references)} ({r.digest}, {format_size(r.size)}) in "
            f"{common.clock.monotonic() - started:.1f}s",
            file=out,
        )
        return EXIT_OK
    if args.images_command == "rm":
        for ref in args.references:
            store.remove(ref)
            print(f"Removed {ref}", file=out)
        return EXIT_OK
    from edgelet.images.gc import ImageGC
    from edgelet.util.clock import RealClock

    async def in_use() -> set[str]:
        from edgelet.runtime.handlers import resolve_handlers
        from edgelet.runtime.runc_runtime import RuncRuntime

        # Every handler's containers: an image a crun pod runs is in use as much as a runc pod's.
        rt = RuncRuntime(
            settings.runtime_paths(),
            runtime_bin=settings.runtime,
            conmon_bin=settings.conmon,
            runtime_handlers=resolve_handlers(settings.runtime_handlers, settings.runtime),
            runtime_handler=settings.runtime_handler,
        )
        return {c.image for p in (await rt.list_pods()).values() for c in p.containers if c.image}

    gc = ImageGC(store, in_use, RealClock(), min_age=0.0)
    plan = asyncio.run(gc.collect(force=True))
    print(f"Removed {len(plan.remove)} image(s), {format_size(plan.freed)}", file=out)
    return EXIT_OK


def cmd_images_import(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    store = image_store(settings)
    status = EXIT_OK
    for name in args.files:
        path = Path(name)
        try:
            # with_progress returns only once the work is done: the closure never outlives this iteration.
            records = with_progress(
                lambda progress: store.import_archive(path, progress=progress),  # noqa: B023
                out,
                tty=_is_tty(out),
            )
        except Exception as exc:
            if not is_expected_error(exc):
                raise
            text = str(exc)
            print(f"{PROG}: {text}" if str(path) in text else f"{PROG}: {path}: {text}", file=err)
            status = EXIT_FAILURE
            continue
        for r in records:
            refs = ", ".join(r.references) or "<none>"
            print(f"Imported {refs} ({r.id.split(':', 1)[-1][:12]}, {format_size(r.size)}) from {path}", file=out)
        if not records:
            print(f"No image found in {path}", file=out)
    return status
