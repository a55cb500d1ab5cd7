"""The URL source's pure decisions: outcome -> state, the cached copy, failure-log throttling, settings keys."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from edgelet.api.annotations import ORIGIN
from edgelet.settings import KEYS, Settings, SettingsError, load_settings, read_config_file
from edgelet.sources.http import (
    BodyProblem,
    CachedManifest,
    Fetched,
    FetchFailed,
    HttpSourceState,
    NotModified,
    apply_cache,
    apply_outcome,
    decode_body,
    redact_url,
    should_log_failure,
)

URL = "https://config.example/pods.yaml"
NODE = "node1"


def pod_yaml(name: str, image: str = "busybox:1.36") -> bytes:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: app
    image: {image}
""".encode()


WEB = pod_yaml("web")
DB = pod_yaml("db")
EMPTY_LIST = b"apiVersion: v1\nkind: PodList\nitems: []\n"


def good_state(body: bytes = WEB, **kw: Any) -> HttpSourceState:
    return apply_outcome(HttpSourceState(), Fetched(body, **kw), url=URL, node_name=NODE)


def apply(state: HttpSourceState, outcome: Any) -> HttpSourceState:
    return apply_outcome(state, outcome, url=URL, node_name=NODE)


def names(state: HttpSourceState) -> list[str]:
    return [p.metadata.name for p in state.pods]


# --- apply_outcome ---------------------------------------------------------------------------


def test_first_good_body() -> None:
    state = good_state(etag='"e1"')
    assert names(state) == ["web-node1"] and state.error is None
    assert state.etag == '"e1"' and state.digest
    (pod,) = state.pods
    assert pod.metadata.annotations[ORIGIN] == URL
    assert state.snapshot().errors == () and state.snapshot().source == "http"


@pytest.mark.parametrize(
    "outcome, fragment",
    [
        (FetchFailed("HTTP status 500 Internal Server Error"), "HTTP status 500"),
        (FetchFailed("timed out after 10s"), "timed out"),
        (Fetched(b""), "empty body"),
        (Fetched(b"\n \n"), "empty body"),
        (Fetched(b"---\n# only a comment\n"), "no manifest"),
        (Fetched(b"kind: [unclosed"), "did not find expected"),
        (Fetched(b"apiVersion: v1\nkind: Service\n"), "unsupported kind Service"),
        (Fetched(b"apiVersion: v1\nkind: Secret\n"), "$.metadata.name: Required value"),
        (Fetched(pod_yaml("web", image="")), "$.spec.containers[0].image"),
    ],
    ids=["status", "timeout", "empty", "blank", "comment", "yaml", "kind", "bad-secret", "invalid-pod"],
)
def test_a_failure_keeps_the_last_good_pods(outcome: Any, fragment: str) -> None:
    before = good_state()
    after = apply(before, outcome)
    assert after.pods == before.pods and after.digest == before.digest
    assert after.error is not None
    assert after.error.origin == URL and after.error.source == "http"
    assert after.error.message.startswith(URL + ": ") and fragment in after.error.message
    assert after.snapshot().errors == (after.error,)


def test_a_failure_with_nothing_held_reports_no_pods() -> None:
    state = apply(HttpSourceState(), FetchFailed("cannot fetch: ConnectError"))
    assert state.pods == () and state.error is not None


@pytest.mark.parametrize("outcome", [NotModified(), Fetched(WEB, etag='"e2"')], ids=["304", "same-body"])
def test_unchanged_clears_the_error_and_keeps_the_pods(outcome: Any) -> None:
    before = good_state(etag='"e1"')
    failed = apply(before, FetchFailed("HTTP status 502"))
    after = apply(failed, outcome)
    assert after.error is None and after.pods == before.pods
    assert after.snapshot() == before.snapshot()


def test_same_body_takes_the_new_validators() -> None:
    after = apply(good_state(etag='"e1"'), Fetched(WEB, etag='"e2"', last_modified="Tue, 01 Oct 2024 00:00:00 GMT"))
    assert after.conditional_headers() == {
        "If-None-Match": '"e2"',
        "If-Modified-Since": "Tue, 01 Oct 2024 00:00:00 GMT",
    }


def test_304_without_a_held_body_is_an_error() -> None:
    assert "304" in apply(HttpSourceState(), NotModified()).error.message  # type: ignore[union-attr]


def test_changed_body_replaces_the_pods() -> None:
    after = apply(good_state(), Fetched(DB))
    assert names(after) == ["db-node1"] and after.error is None


def test_explicit_empty_list_removes_every_pod() -> None:
    after = apply(good_state(), Fetched(EMPTY_LIST))
    assert after.pods == () and after.error is None


def test_the_same_bad_body_again_keeps_its_error() -> None:
    bad = Fetched(b"kind: [unclosed")
    once = apply(good_state(etag='"e1"'), bad)
    recovered_304 = apply(once, NotModified())
    again = apply(recovered_304, bad)
    assert again.error == once.error and again.pods == once.pods


def test_validators_are_sent_only_for_a_held_body() -> None:
    assert HttpSourceState(etag='"x"').conditional_headers() == {}
    assert good_state().conditional_headers() == {}  # the server gave none
    assert good_state(etag='"e1"').conditional_headers() == {"If-None-Match": '"e1"'}


# --- item locations in errors ------------------------------------------------------------------


def pod_list(*images: str, kind: str = "PodList") -> bytes:
    items = "".join(
        f"- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: p{i}\n  spec:\n    containers:\n"
        f"    - name: app\n      image: '{image}'\n"
        for i, image in enumerate(images)
    )
    return f"apiVersion: v1\nkind: {kind}\nitems:\n{items}".encode()


def test_invalid_item_rejects_the_whole_list_and_is_named() -> None:
    with pytest.raises(BodyProblem) as info:
        decode_body(pod_list("busybox", "busybox", ""), URL, NODE)
    assert str(info.value).startswith("$.items[2].spec.containers[0].image: ")
    assert info.value.pod == "default/p2-node1"


def test_invalid_item_in_a_later_document() -> None:
    body = WEB + b"---\n" + pod_list("busybox", "", kind="List")
    with pytest.raises(BodyProblem, match=r"^document 1: \$\.items\[1\]\.spec\.containers\[0\]\.image: "):
        decode_body(body, URL, NODE)


def test_json_list_is_located_too() -> None:
    body = (
        b'{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"},'
        b'"spec":{"containers":[{"name":"c","image":""}]}}]}'
    )
    with pytest.raises(BodyProblem, match=r"^\$\.items\[0\]\.spec"):
        decode_body(body, URL, NODE)


def test_empty_list_kinds_are_explicit() -> None:
    assert decode_body(EMPTY_LIST, URL, NODE) == ()
    assert decode_body(b"apiVersion: v1\nkind: List\nitems: []\n", URL, NODE) == ()
    assert decode_body(b'{"apiVersion": "v1", "kind": "PodList", "items": []}', URL, NODE) == ()


# --- the cached copy ----------------------------------------------------------------------------


def test_cache_gives_the_same_pods_as_the_fetch() -> None:
    fetched = good_state(etag='"e1"')
    cached = CachedManifest(url=URL, fetched_at=1.0, body=WEB, etag='"e1"')
    seeded = apply_cache(HttpSourceState(), cached, url=URL, node_name=NODE)
    assert seeded.pods == fetched.pods and seeded.error is None and seeded.from_cache
    assert seeded.conditional_headers() == {"If-None-Match": '"e1"'}


def test_while_on_the_cache_fetch_failures_are_not_reported_but_bad_bodies_are() -> None:
    seeded = apply_cache(HttpSourceState(), CachedManifest(url=URL, fetched_at=1.0, body=WEB), url=URL, node_name=NODE)
    offline = apply(seeded, FetchFailed("cannot fetch: ConnectError"))
    assert offline.error is None and offline.pods == seeded.pods
    bad = apply(offline, Fetched(b""))
    assert bad.error is not None and bad.pods == seeded.pods and not bad.from_cache
    # Once the URL has answered, an outage is reported as usual.
    assert apply(bad, FetchFailed("timed out after 10s")).error is not None


def test_cache_of_another_url_or_invalid_is_refused() -> None:
    with pytest.raises(BodyProblem, match="another URL"):
        apply_cache(
            HttpSourceState(), CachedManifest(url=URL + "?x", fetched_at=1.0, body=WEB), url=URL, node_name=NODE
        )
    with pytest.raises(BodyProblem):
        apply_cache(HttpSourceState(), CachedManifest(url=URL, fetched_at=1.0, body=b"{"), url=URL, node_name=NODE)


def test_uid_depends_on_the_url() -> None:
    other = apply_outcome(HttpSourceState(), Fetched(WEB), url=URL + "2", node_name=NODE)
    assert other.pods[0].metadata.uid != good_state().pods[0].metadata.uid


# --- small pure helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "consecutive, now, last, expected",
    [
        (1, 0.0, None, True),
        (3, 10.0, 9.0, True),
        (4, 10.0, 9.0, False),
        (9, 10.0, 9.0, False),
        (10, 10.0, 9.0, True),
        (11, 10.0, 9.0, False),
        (11, 70.0, 9.0, True),  # a minute since the last one logged
        (12, 10.0, None, True),
    ],
)
def test_should_log_failure(consecutive: int, now: float, last: float | None, expected: bool) -> None:
    assert should_log_failure(consecutive, now, last) is expected


@pytest.mark.parametrize(
    "url, shown",
    [
        ("https://h/p", "https://h/p"),
        ("https://user@h/p", "https://user@h/p"),
        ("https://user:secret@h:8443/p?q=1", "https://user:***@h:8443/p?q=1"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_password_in_url_stays_out_of_errors_and_annotations() -> None:
    url = "https://u:pw@h/p"
    state = apply_outcome(HttpSourceState(), Fetched(WEB), url=url, node_name=NODE)
    assert state.pods[0].metadata.annotations[ORIGIN] == "https://u:***@h/p"
    failed = apply_outcome(state, FetchFailed("x"), url=url, node_name=NODE)
    assert "pw" not in failed.error.message and failed.error.origin == "https://u:***@h/p"  # type: ignore[union-attr]


# --- settings keys ------------------------------------------------------------------------------------


def load(
    flags: dict[str, Any] | None = None, env: dict[str, str] | None = None, config: Path | str = "/dev/null"
) -> Settings:
    return load_settings(flags, config=config, env=env or {})


def test_defaults() -> None:
    s = load()
    assert s.manifest_url is None
    assert s.manifest_url_header == ()
    assert s.http_check_frequency == 20.0
    assert s.manifest_url_ca is None
    assert KEYS["manifest_url_header"].flags == ("--manifest-url-header",)


def test_flags_and_env() -> None:
    s = load(
        {
            "manifest_url": "http://10.0.0.1:8080/pods",
            "manifest_url_header": "Authorization: Bearer a:b, X-A:1",
            "http_check_frequency": "1m",
            "manifest_url_ca": "/etc/ca.pem",
        }
    )
    assert s.manifest_url == "http://10.0.0.1:8080/pods"
    assert s.manifest_url_header == (("Authorization", "Bearer a:b"), ("X-A", "1"))
    assert s.http_check_frequency == 60.0
    assert s.manifest_url_ca == Path("/etc/ca.pem")
    e = load(env={"EDGELET_MANIFEST_URL_HEADER": "X-Token:abc,X-Token:def", "EDGELET_MANIFEST_URL": "https://h/p"})
    assert e.manifest_url_header == (("X-Token", "abc"), ("X-Token", "def"))
    # A repeated flag, once the CLI collects repeats into a list.
    assert load({"manifest_url_header": ["A:1", "B:2,C:3"]}).manifest_url_header == (("A", "1"), ("B", "2"), ("C", "3"))


@pytest.mark.parametrize(
    "toml, expected",
    [
        (
            '[manifest_url_header]\nAuthorization = "Bearer x"\nX-Device = "d1"\n',
            (("Authorization", "Bearer x"), ("X-Device", "d1")),
        ),
        ('manifest_url_header = ["A:1", "B: 2"]\n', (("A", "1"), ("B", "2"))),
        ("manifest_url_header = []\n", ()),
    ],
)
def test_toml_headers(tmp_path: Path, toml: str, expected: tuple[tuple[str, str], ...]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('manifest_url = "https://h/p"\nhttp_check_frequency = 5\n' + toml)
    values = read_config_file(cfg)
    assert values["manifest_url_header"] == expected
    assert values["http_check_frequency"] == 5.0


@pytest.mark.parametrize(
    "key, raw, fragment",
    [
        ("manifest_url", "ftp://h/p", "http:// or https://"),
        ("manifest_url", "h/p", "http:// or https://"),
        ("manifest_url", "https:///p", "with a host"),
        ("manifest_url_header", "NoColon", "expected Name:value"),
        ("manifest_url_header", "Bad Name:x", "invalid header name"),
        ("manifest_url_header", ":x", "invalid header name"),
        ("http_check_frequency", "0", "positive"),
    ],
)
def test_bad_values_are_refused(key: str, raw: str, fragment: str) -> None:
    with pytest.raises(SettingsError, match=fragment):
        load({key: raw})


def test_bad_toml_header_values(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[manifest_url_header]\nX-A = 1\n")
    with pytest.raises(SettingsError, match="manifest_url_header"):
        read_config_file(cfg)
    cfg.write_text('manifest_url_header = "X-A:1\\nX-B:2"\n')
    with pytest.raises(SettingsError, match="CR, LF"):
        read_config_file(cfg)


def test_empty_url_means_no_url_source() -> None:
    assert load({"manifest_url": ""}).manifest_url is None


def test_settings_with_headers_are_hashable_and_frozen() -> None:
    s = replace(Settings(), manifest_url_header=(("A", "1"),))
    assert hash(s.manifest_url_header)


def test_config_maps_and_secrets_come_with_the_body() -> None:
    """The URL may serve ConfigMaps and Secrets beside its pods (or alone); they name the URL, redacted."""
    body = WEB + b"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: conf}\ndata: {k: v}\n"
    state = apply(HttpSourceState(), Fetched(body))
    assert state.error is None and len(state.pods) == 1
    [obj] = state.snapshot().objects
    assert (obj.kind, obj.full_name, obj.data, obj.source, obj.origin) == (
        "ConfigMap",
        "default/conf",
        {"k": b"v"},
        "http",
        URL,
    )
    alone = apply(
        HttpSourceState(), Fetched(b"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: v}\n")
    )
    assert alone.error is None and alone.pods == () and [o.kind for o in alone.objects] == ["Secret"]
    # A bad pod after an object is still located by its own place among the pods.
    bad = apply(
        HttpSourceState(),
        Fetched(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + pod_yaml("web", image="")),
    )
    assert bad.error is not None and "document 1: $.spec.containers[0].image" in bad.error.message
