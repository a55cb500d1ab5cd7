"""Field errors worded as the API server's field.Error.ErrorBody() prints them, and apimachinery's name checks.

Shared by every object edgelet validates as the API server would (the Pod
today); each check returns kubectl's own messages so users see the text they
know.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from edgelet.api.errors import FieldError

# apimachinery/pkg/util/validation: formats and messages, verbatim, so users see kubectl's text.
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + ")*"
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_DNS1123_LABEL = re.compile(f"^{_DNS1123_LABEL_FMT}$")
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_QUALIFIED_NAME = re.compile(f"^{_QUALIFIED_NAME_FMT}$")
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_PORT_NAME_CHARSET = re.compile(r"^[-a-z0-9]+$")
_PORT_NAME_LETTER = re.compile(r"[a-z]")

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)


# ---------------------------------------------------------------------------
# Error constructors: the text of field.Error.ErrorBody() for each error type.


def _show(value: Any) -> str:
    """A bad value as Go's ErrorBody prints it: strings quoted (%q), numbers and bools bare (%v)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _go_quote(value)
    return str(value)


def _go_quote(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif not ch.isprintable():
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _with_detail(body: str, detail: str) -> str:
    return f"{body}: {detail}" if detail else body


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, _with_detail("Required value", detail))


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, _with_detail(f"Invalid value: {_show(value)}", detail))


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(path, f"Duplicate value: {_show(value)}")


def not_found(path: str, value: Any) -> FieldError:
    return FieldError(path, f"Not found: {_show(value)}")


def not_supported(path: str, value: Any, supported: Iterable[str]) -> FieldError:
    values = ", ".join(_go_quote(v) for v in supported)
    return FieldError(path, f"Unsupported value: {_show(value)}: supported values: {values}")


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, _with_detail("Forbidden", detail))


def too_many(path: str, actual: int, maximum: int) -> FieldError:
    return FieldError(path, f"Too many: {actual}: must have at most {maximum} items")


def too_long(path: str, maximum: int) -> FieldError:
    return FieldError(path, f"Too long: must have at most {maximum} bytes")


# ---------------------------------------------------------------------------
# Name predicates (apimachinery/pkg/util/validation), each returning its messages.


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def regex_error(message: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def range_error(low: int, high: int) -> str:
    return f"must be between {low} and {high}, inclusive"


def dns1123_label_errors(value: str) -> list[str]:
    errors = [_max_len(63)] if len(value) > 63 else []
    if not _DNS1123_LABEL.match(value):
        errors.append(regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errors


def dns1123_subdomain_errors(value: str) -> list[str]:
    errors = [_max_len(253)] if len(value) > 253 else []
    if not _DNS1123_SUBDOMAIN.match(value):
        errors.append(regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def is_dns1123_label(value: str) -> bool:
    return not dns1123_label_errors(value)


def is_dns1123_subdomain(value: str) -> bool:
    return not dns1123_subdomain_errors(value)


def port_name_errors(name: str) -> list[str]:
    """IANA_SVC_NAME: at most 15 lowercase alphanumerics and '-', one letter at least, no '--' nor '-' at the ends."""
    errors = [_max_len(15)] if len(name) > 15 else []
    if not _PORT_NAME_CHARSET.match(name):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _PORT_NAME_LETTER.search(name):
        errors.append("must contain at least one letter (a-z)")
    if "--" in name:
        errors.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def qualified_name_errors(value: str) -> list[str]:
    """A label or annotation key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    name_example = ("MyName", "my.name", "123-abc")
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a qualified name "
            + regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, *name_example)
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part " + _max_len(63))
    if not _QUALIFIED_NAME.match(name):
        errors.append("name part " + regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, *name_example))
    return errors


def label_value_errors(value: str) -> list[str]:
    errors = [_max_len(63)] if len(value) > 63 else []
    if not _LABEL_VALUE.match(value):
        errors.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def port_number_errors(port: int) -> list[str]:
    return [] if 1 <= port <= 65535 else [range_error(1, 65535)]


def is_env_var_name(name: str) -> bool:
    # Kubernetes' relaxed rule (RelaxedEnvironmentVariableValidation, on by default since 1.32).
    return all(" " <= ch <= "~" and ch != "=" for ch in name)
