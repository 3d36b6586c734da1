"""Typed loading at the boundaries: data read from a file becomes a dataclass, or one line says why not.

Every file the bot reads back (the registry and its state file, results, baselines, fix bundles,
verification.json, the nightly's settings) is validated against the dataclass that holds it, by a
pydantic `TypeAdapter` built once per class. The rules are strict: a value must already have the
field's type. YAML's `requires: timm` is a string, not a list, and `remote_code: "false"` is a
string, not false; both are refused instead of being read as ['t', 'i', 'm', 'm'] or as truthy.
The only coercions are explicit ones, each written where it applies:
  - an integer where a float is expected (JSON writes 300.0 as 300);
  - a verdict word the bot does not know reads as `crash` (`Verdict.of`: a newer bot's word
    never counts as ok).
An unknown key is refused too (a typo such as `requirs` would otherwise be dropped silently).

`DataError` is one line: `FILE: entry E: field F: expected T, got W` (more problems: "and N more").
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

T = TypeVar("T")

_ADAPTERS: dict[Any, TypeAdapter] = {}
_HINTS: dict[type, dict[str, Any]] = {}


class DataError(ValueError):
    """A file's content does not match its type. `str()` is one line: where, which field, what was expected."""

    def __init__(self, problem: str, where: str = ""):
        self.problem, self.where = problem, where
        super().__init__(f"{where}: {problem}" if where else problem)

    def at(self, where: str) -> "DataError":
        """The same problem, located further out (`at("results.jsonl: line 3")`)."""
        if not where:
            return self
        return DataError(self.problem, f"{where}: {self.where}" if self.where else where)


class Strict:
    """Mixin for dataclasses read from files: strict types and no unknown keys.

    pydantic reads `__pydantic_config__` from a stdlib dataclass; strict mode would also demand
    an instance where a nested dataclass is expected, but the input is a mapping (parsed JSON or
    YAML), so the dataclass node itself accepts a mapping while its fields stay strict."""

    __pydantic_config__ = ConfigDict(strict=True, extra="forbid")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        schema = handler(source)
        if schema.get("type") == "dataclass":
            schema["strict"] = False
        return schema


def adapter(tp: Any) -> TypeAdapter:
    """The validator for `tp`, built once: building it is the costly part (~5 ms a class);
    validating a result with it takes ~30 us."""
    a = _ADAPTERS.get(tp)
    if a is None:
        a = _ADAPTERS[tp] = TypeAdapter(tp)
    return a


def load_as(tp: type[T], data: Any, where: str = "", *, entries: str | None = None) -> T:
    """`data` (parsed JSON/YAML) as a `tp`, or a `DataError` naming `where` and the field.
    `entries`: the name of a mapping field whose keys are entries (a baseline's `entries`):
    a problem inside one is reported as `entry KEY: field F`."""
    try:
        return adapter(tp).validate_python(data)
    except ValidationError as e:
        raise DataError(describe(e, tp, entries=entries), where) from None


def describe(error: ValidationError, tp: Any, *, entries: str | None = None) -> str:
    """One line for a validation error: the first problem, and how many more there are."""
    errs = error.errors(include_url=False)
    loc = tuple(errs[0]["loc"])
    prefix, shown = "", loc
    if entries and len(loc) >= 2 and loc[0] == entries:
        prefix, shown = f"entry {loc[1]}: ", loc[2:]
    line = prefix + _problem(errs[0], tp, loc, shown)
    if len(errs) > 1:
        line += f" (and {len(errs) - 1} more)"
    return line


# ---- formatting ------------------------------------------------------------------------------
def _problem(err: dict[str, Any], tp: Any, loc: tuple, shown: tuple) -> str:
    """`loc` finds the annotation inside `tp`; `shown` is the part of it the message names."""
    kind, value = err["type"], err.get("input")
    where = f"field {_path(shown)}: " if shown else ""
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        known = _fields(_type_at(tp, loc[:-1]))
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean {close[0]}?" if close else (f"; known: {', '.join(known)}" if known else "")
        return f"{where}unknown key{hint}"
    if kind in ("missing", "missing_argument"):
        return f"{where}required, missing"
    if kind in ("dataclass_args_type", "dataclass_type", "dataclass_exact_type"):
        return f"{where}expected a mapping, got {_got(value)}"
    # A type's own validator (Verdict's) words its expectation itself.
    expected = _from_message(err) if kind == "value_error" else _expected(_type_at(tp, loc)) or _from_message(err)
    hint = ""
    if isinstance(value, str) and kind == "list_type":
        hint = f" (a single item is still a list: [{value}])"
    elif isinstance(value, str) and kind == "bool_type":
        hint = " (write it unquoted)"
    return f"{where}expected {expected}, got {_got(value)}{hint}"


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _got(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}" if value is not None else "null"


def _from_message(err: dict[str, Any]) -> str:
    msg = err["msg"]
    for prefix in ("Input should be ", "Value error, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    return msg


def _hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types by the name the file uses (a pydantic alias such as `pass`)."""
    h = _HINTS.get(cls)
    if h is None:
        h = {}
        for name, tp in typing.get_type_hints(cls, include_extras=True).items():
            meta = getattr(tp, "__metadata__", ())
            alias = next((m.alias for m in meta if isinstance(m, FieldInfo) and m.alias), name)
            h[alias] = tp.__origin__ if meta else tp
        _HINTS[cls] = h
    return h


def _unwrap(tp: Any) -> Any:
    """`X | None` -> X (pydantic reports no union member for a nullable field)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return tp


def _type_at(tp: Any, loc: tuple) -> Any:
    """The annotation at `loc` inside `tp`, or None where the path cannot be followed."""
    for part in loc:
        tp = _unwrap(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if dataclasses.is_dataclass(tp) and isinstance(part, str):
            tp = _hints(tp).get(part) if isinstance(tp, type) else None
        elif origin is list and args and isinstance(part, int):
            tp = args[0]
        elif origin is dict and len(args) == 2:
            tp = args[1]
        else:
            return None
        if tp is None:
            return None
    return tp


def _fields(tp: Any) -> list[str]:
    tp = _unwrap(tp)
    return list(_hints(tp)) if dataclasses.is_dataclass(tp) and isinstance(tp, type) else []


_PLURAL = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}


def _expected(tp: Any) -> str | None:
    if tp is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        names = [_expected(a) or "?" for a in args if a is not type(None)]
        return " or ".join(names + (["null"] if type(None) in args else []))
    if origin is typing.Literal:
        return " or ".join(map(repr, args)) if len(args) <= 2 else "one of " + ", ".join(map(repr, args))
    if origin is list and args:
        return f"a list of {_PLURAL.get(args[0]) or _expected(args[0])}"
    if origin is dict:
        return "a mapping" if not args or args[1] is Any else f"a mapping to {_PLURAL.get(args[1]) or _expected(args[1])}"
    if tp is bool:
        return "true or false"
    if tp is float:
        return "a number"
    if tp is int:
        return "an integer"
    if tp is str:
        return "a string"
    if tp is Any:
        return "any value"
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    return getattr(tp, "__name__", str(tp))


def read_json(path: str | Path) -> Any:
    """A JSON file's data; unreadable JSON is a one-line `DataError` naming the file."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as e:
        raise DataError(f"not valid JSON ({e})", str(path)) from None
