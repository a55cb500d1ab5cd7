"""podconfig.merge: SET snapshots to REMOVE/ADD/UPDATE/RECONCILE, name conflicts within and across sources."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgelet.api.annotations import CONFIG_SEEN
from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec, PodStatus
from edgelet.podconfig import ConfigState, PodChange, merge
from edgelet.podconfig.merge import format_seen, pods_differ_semantically
from edgelet.sources import ManifestProblem, SourceSnapshot

NOW = 1_700_000_000.123456
LATER = NOW + 60


def mkpod(
    name: str,
    uid: str | None = None,
    *,
    source: str = "file",
    origin: str | None = None,
    image: str = "busybox",
    labels: dict | None = None,
    ann: dict | None = None,
    phase: str | None = None,
    ns: str = "default",
) -> Pod:
    annotations = {
        "kubernetes.io/config.source": source,
        "kubernetes.io/config.hash": uid or name,
        "edgelet.io/origin": origin or f"/etc/kubernetes/manifests/{name}.yaml",
    }
    annotations.update(ann or {})
    return Pod(
        api_version="v1",
        kind="Pod",
        metadata=ObjectMeta(name=name, namespace=ns, uid=uid or f"uid-{name}", labels=labels, annotations=annotations),
        spec=PodSpec(containers=[Container(name="app", image=image)], restart_policy="Always"),
        status=PodStatus(phase=phase) if phase else None,
    )


def snap(source: str, *pods: Pod, errors: tuple = ()) -> SourceSnapshot:
    return SourceSnapshot(source=source, pods=tuple(pods), errors=errors)  # type: ignore[arg-type]


def ops(changes: list[PodChange]) -> list[tuple[str, str]]:
    return [(c.op, c.pod.metadata.uid) for c in changes]


def accepted(state: ConfigState) -> dict[str, Pod]:
    return {p.metadata.uid: p for p in state.all_pods()}


def strip(pod: Pod) -> Pod:
    """The pod without podconfig's own annotation, to compare with what a source sent."""
    ann = {k: v for k, v in (pod.metadata.annotations or {}).items() if k != CONFIG_SEEN}
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, annotations=ann))


# --- one source: table of (first snapshot, second snapshot, expected changes of the second merge) ---

A = mkpod("a")
B = mkpod("b")
C = mkpod("c")


def _relabel(p: Pod) -> Pod:
    return msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, labels={"tier": "x"}))


def _annotate(p: Pod, key: str) -> Pod:
    ann = dict(p.metadata.annotations or {})
    ann[key] = "v"
    return msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, annotations=ann))


def _respec(p: Pod) -> Pod:
    return msgspec.structs.replace(p, spec=msgspec.structs.replace(p.spec, restart_policy="Never"))


def _restatus(p: Pod) -> Pod:
    return msgspec.structs.replace(p, status=PodStatus(phase="Running"))


CASES = [
    ("first snapshot adds everything", [], [A, B], [("ADD", "uid-a"), ("ADD", "uid-b")]),
    ("same snapshot again: nothing", [A, B], [A, B], []),
    ("vanished uid is removed", [A, B], [B], [("REMOVE", "uid-a")]),
    ("empty snapshot removes all", [A, B], [], [("REMOVE", "uid-a"), ("REMOVE", "uid-b")]),
    ("order: REMOVE before ADD", [A], [B], [("REMOVE", "uid-a"), ("ADD", "uid-b")]),
    ("spec change is an update", [A], [_respec(A)], [("UPDATE", "uid-a")]),
    ("label change is an update", [A], [_relabel(A)], [("UPDATE", "uid-a")]),
    ("non-local annotation is an update", [A], [_annotate(A, "team")], [("UPDATE", "uid-a")]),
    ("edgelet.io annotation is local", [A], [_annotate(A, "edgelet.io/whatever")], [("RECONCILE", "uid-a")]),
    ("config.mirror annotation is local", [A], [_annotate(A, "kubernetes.io/config.mirror")], [("RECONCILE", "uid-a")]),
    ("status-only change is a reconcile", [A], [_restatus(A)], [("RECONCILE", "uid-a")]),
    (
        "all four kinds in kubelet's order",
        [A, B, C],
        [_restatus(C), mkpod("d"), _respec(B)],
        [("REMOVE", "uid-a"), ("ADD", "uid-d"), ("UPDATE", "uid-b"), ("RECONCILE", "uid-c")],
    ),
]


@pytest.mark.parametrize(("first", "second", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_single_source_changes(first: list[Pod], second: list[Pod], expected: list[tuple[str, str]]) -> None:
    state, _ = merge(ConfigState(), snap("file", *first), NOW)
    state, changes = merge(state, snap("file", *second), LATER)
    assert ops(changes) == expected
    assert [(p.metadata.uid, p.spec, p.status) for p in state.all_pods()] == [
        (p.metadata.uid, p.spec, p.status) for p in second
    ]


def test_add_sets_config_seen_and_later_changes_keep_it() -> None:
    state, changes = merge(ConfigState(), snap("file", A), NOW)
    seen = changes[0].pod.metadata.annotations[CONFIG_SEEN]
    assert seen == "2023-11-14T22:13:20.123456Z"
    state, changes = merge(state, snap("file", _respec(A)), LATER)
    assert changes[0].op == "UPDATE"
    assert changes[0].pod.metadata.annotations[CONFIG_SEEN] == seen
    state, changes = merge(state, snap("file", _restatus(_respec(A))), LATER + 1)
    assert changes[0].op == "RECONCILE"
    assert changes[0].pod.metadata.annotations[CONFIG_SEEN] == seen
    assert accepted(state)["uid-a"].metadata.annotations[CONFIG_SEEN] == seen
    # The source's own object is not modified.
    assert CONFIG_SEEN not in (A.metadata.annotations or {})


def test_unchanged_pod_keeps_the_object_the_workers_hold() -> None:
    state, changes = merge(ConfigState(), snap("file", A), NOW)
    held = changes[0].pod
    state, changes = merge(state, snap("file", mkpod("a")), LATER)
    assert changes == []
    assert accepted(state)["uid-a"] is held


@pytest.mark.parametrize(
    ("now", "text"),
    [
        (0.0, "1970-01-01T00:00:00Z"),
        (1_700_000_000.5, "2023-11-14T22:13:20.5Z"),
        (1_700_000_000.000001, "2023-11-14T22:13:20.000001Z"),
    ],
)
def test_format_seen_is_go_rfc3339nano(now: float, text: str) -> None:
    assert format_seen(now) == text


def test_errors_and_seen_sources_are_recorded() -> None:
    err = ManifestProblem(source="file", origin="/m/bad.yaml", message="$.spec: required")
    state, _ = merge(ConfigState(), snap("file", A, errors=(err,)), NOW)
    assert state.errors == {"file": (err,)}
    assert state.seen_sources == {"file"}
    state, _ = merge(state, snap("http"), NOW)
    assert state.seen_sources == {"file", "http"}
    assert state.errors == {"file": (err,), "http": ()}
    state, _ = merge(state, snap("file", A), NOW)
    assert state.errors["file"] == ()


# --- name conflicts ---


def test_duplicate_name_within_a_source_first_wins() -> None:
    first = mkpod("web", "uid-1", origin="/m/a.yaml")
    second = mkpod("web", "uid-2", origin="/m/b.yaml")
    state, changes = merge(ConfigState(), snap("file", first, second), NOW)
    assert ops(changes) == [("ADD", "uid-1")]
    assert list(accepted(state)) == ["uid-1"]
    (rej,) = state.rejected
    assert rej.source == "file" and rej.origin == "/m/b.yaml" and rej.pod == "default/web"
    assert rej.reason == "FailedValidation"
    assert "/m/a.yaml" in rej.message and "/m/b.yaml" in rej.message


def test_same_name_in_other_namespace_is_no_conflict() -> None:
    state, changes = merge(ConfigState(), snap("file", mkpod("web", "u1"), mkpod("web", "u2", ns="kube-system")), NOW)
    assert ops(changes) == [("ADD", "u1"), ("ADD", "u2")]
    assert state.rejected == ()


def test_file_beats_http_whichever_arrives_first() -> None:
    f = mkpod("web", "uid-f", source="file", origin="/m/web.yaml")
    h = mkpod("web", "uid-h", source="http", origin="http://cfg/pods")
    # http first: admitted; then file claims the name -> the http pod goes, the file pod comes.
    state, changes = merge(ConfigState(), snap("http", h), NOW)
    assert ops(changes) == [("ADD", "uid-h")]
    state, changes = merge(state, snap("file", f), LATER)
    assert ops(changes) == [("REMOVE", "uid-h"), ("ADD", "uid-f")]
    assert list(accepted(state)) == ["uid-f"]
    assert [(r.source, r.origin) for r in state.rejected] == [("http", "http://cfg/pods")]
    assert "/m/web.yaml" in state.rejected[0].message


def test_freed_name_admits_the_rejected_pod_of_the_other_source_in_the_same_merge() -> None:
    f = mkpod("web", "uid-f", source="file", origin="/m/web.yaml")
    h = mkpod("web", "uid-h", source="http", origin="http://cfg/pods")
    state, _ = merge(ConfigState(), snap("file", f), NOW)
    state, changes = merge(state, snap("http", h), NOW)
    assert changes == []
    assert len(state.rejected) == 1
    # The file goes away: the http pod is admitted by the file source's merge.
    state, changes = merge(state, snap("file"), LATER)
    assert ops(changes) == [("REMOVE", "uid-f"), ("ADD", "uid-h")]
    assert state.rejected == ()
    assert changes[1].pod.metadata.annotations[CONFIG_SEEN] == format_seen(LATER)
    assert list(accepted(state)) == ["uid-h"]


def test_freed_name_within_a_source() -> None:
    first = mkpod("web", "uid-1", origin="/m/a.yaml")
    second = mkpod("web", "uid-2", origin="/m/b.yaml")
    state, _ = merge(ConfigState(), snap("file", first, second), NOW)
    state, changes = merge(state, snap("file", second), LATER)
    assert ops(changes) == [("REMOVE", "uid-1"), ("ADD", "uid-2")]
    assert state.rejected == ()


def test_uid_moving_to_another_source_is_not_removed_and_added() -> None:
    h = mkpod("web", "same", source="http", origin="http://cfg/pods")
    f = mkpod("web", "same", source="file", origin="/m/web.yaml")
    state, _ = merge(ConfigState(), snap("http", h), NOW)
    state, changes = merge(state, snap("file", f), LATER)
    # config.source and edgelet.io/origin are local: nothing to do on the device, but the object is refreshed.
    assert ops(changes) == [("RECONCILE", "same")]
    assert changes[0].pod.metadata.annotations["kubernetes.io/config.source"] == "file"
    assert changes[0].pod.metadata.annotations[CONFIG_SEEN] == format_seen(NOW)


def test_duplicate_uid_is_rejected() -> None:
    state, changes = merge(ConfigState(), snap("file", mkpod("a", "same"), mkpod("b", "same")), NOW)
    assert ops(changes) == [("ADD", "same")]
    assert [r.pod for r in state.rejected] == ["default/b"]


def test_state_built_without_snapshots_still_merges() -> None:
    # A ConfigState made by hand (only `pods`) is read as each source's latest snapshot.
    state = ConfigState(pods={"file": {"uid-a": A}}, seen_sources=frozenset({"file"}))
    state, changes = merge(state, snap("http", mkpod("a", "uid-h", source="http")), NOW)
    assert changes == []
    assert [r.source for r in state.rejected] == ["http"]


def test_pods_differ_semantically_ignores_local_annotations_and_status() -> None:
    assert not pods_differ_semantically(A, _annotate(_restatus(A), CONFIG_SEEN))
    assert pods_differ_semantically(A, _respec(A))


# --- properties ---

NAMES = ["a", "b", "c"]
pod_strategy = st.builds(
    lambda name, version, spec_v, phase, ns: mkpod(
        name,
        f"uid-{name}-{version}",
        image=f"img:{spec_v}",
        phase=phase,
        ns=ns,
        origin=f"/m/{name}-{version}.yaml",
    ),
    st.sampled_from(NAMES),
    st.integers(0, 2),
    st.integers(0, 1),
    st.sampled_from([None, "Running"]),
    st.sampled_from(["default", "other"]),
)
snapshot_strategy = st.builds(
    lambda source, pods: snap(source, *pods),
    st.sampled_from(["file", "http"]),
    st.lists(pod_strategy, max_size=5),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(snapshot_strategy, min_size=1, max_size=6))
def test_changes_turn_the_old_set_into_the_new_set(snapshots: list[SourceSnapshot]) -> None:
    state = ConfigState()
    t = NOW
    for s in snapshots:
        before = accepted(state)
        state, changes = merge(state, s, t)
        t += 1
        after = accepted(state)

        # Applying the changes to the old set gives the new set.
        applied = dict(before)
        for ch in changes:
            uid = ch.pod.metadata.uid
            if ch.op == "REMOVE":
                assert uid in applied
                del applied[uid]
            elif ch.op == "ADD":
                assert uid not in applied
                applied[uid] = ch.pod
            else:
                assert uid in applied
                applied[uid] = ch.pod
        assert applied.keys() == after.keys()
        assert all(applied[u] == after[u] for u in after)

        # No UID both added and removed; kubelet's order of operations.
        added = {c.pod.metadata.uid for c in changes if c.op == "ADD"}
        removed = {c.pod.metadata.uid for c in changes if c.op == "REMOVE"}
        assert not added & removed
        order = {"REMOVE": 0, "ADD": 1, "UPDATE": 2, "RECONCILE": 3}
        assert [order[c.op] for c in changes] == sorted(order[c.op] for c in changes)

        # Full names unique among accepted pods; every pod of the latest snapshots is accepted or rejected.
        names = [f"{p.metadata.namespace}/{p.metadata.name}" for p in after.values()]
        assert len(names) == len(set(names))
        total = sum(len(p) for p in state.snapshots.values())
        assert len(after) + len(state.rejected) == total
        # Every accepted pod carries config.seen.
        assert all(CONFIG_SEEN in p.metadata.annotations for p in after.values())


@settings(max_examples=100, deadline=None)
@given(st.lists(snapshot_strategy, min_size=1, max_size=6))
def test_result_depends_only_on_the_latest_snapshot_of_each_source(snapshots: list[SourceSnapshot]) -> None:
    state = ConfigState()
    for s in snapshots:
        state, _ = merge(state, s, NOW)
    fresh = ConfigState()
    for source in ("file", "http"):
        if source in state.snapshots:
            fresh, _ = merge(fresh, snap(source, *state.snapshots[source]), NOW)
    assert accepted(fresh).keys() == accepted(state).keys()
    assert set(fresh.rejected) == set(state.rejected)
