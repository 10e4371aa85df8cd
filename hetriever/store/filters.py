"""Chroma-style `where` filters: one validated form for both retrievers.

The dense side passes the normalised filter to Chroma's `where=`; the BM25 side evaluates the
same filter in Python with `matches()`. `matches()` mirrors what chromadb 1.5.9 actually does
(checked against a real collection in tests/store/test_filters.py), including its less obvious
rules:

- a missing key matches only the negative operators `$ne`, `$nin` and `$not_contains`;
- ints and floats compare by value (`2 == 2.0`), bools never equal numbers;
- a list-valued field matches only `$contains` / `$not_contains` (element type must match
  exactly: an int list does not contain `2.0`); `$eq`/`$in`/`$gt`... on a list never match and
  `$ne`/`$nin` always do;
- `$contains` on a scalar field never matches (Chroma does not treat it as equality).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hetriever.core.errors import InvalidFilterError

COMPARISON_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
LIST_OPS = ("$in", "$nin")
CONTAINS_OPS = ("$contains", "$not_contains")
FIELD_OPS = COMPARISON_OPS + LIST_OPS + CONTAINS_OPS
LOGICAL_OPS = ("$and", "$or")
MAX_DEPTH = 8
MAX_CLAUSES = 100

_ALLOWED = (
    f"field operators {', '.join(FIELD_OPS)}; logical operators {', '.join(LOGICAL_OPS)}; "
    'e.g. {"section": "functions"} or {"$and": [{"a": 1}, {"b": {"$gt": 2}}]}'
)


def _bad(problem: str) -> InvalidFilterError:
    return InvalidFilterError(f"invalid metadata filter: {problem}", hint=f"allowed: {_ALLOWED}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_scalar(key: str, op: str, value: Any) -> None:
    if not isinstance(value, (str, int, float, bool)):
        raise _bad(
            f"{key!r} {op} needs a str, int, float or bool, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad(f"{key!r} {op} needs a finite number, got {value!r}")


def _field_clause(key: str, op: str, operand: Any) -> dict:
    if op not in FIELD_OPS:
        raise _bad(f"unknown operator {op!r} for key {key!r}")
    if op in LIST_OPS:
        if not isinstance(operand, (list, tuple)) or not operand:
            raise _bad(f"{key!r} {op} needs a non-empty list, got {operand!r}")
        for item in operand:
            _check_scalar(key, op, item)
        if len({type(item) for item in operand}) > 1:
            raise _bad(
                f"{key!r} {op} list mixes types {sorted({type(i).__name__ for i in operand})};"
                " use one type"
            )
        return {key: {op: list(operand)}}
    _check_scalar(key, op, operand)
    if op in ("$gt", "$gte", "$lt", "$lte") and not _is_number(operand):
        raise _bad(f"{key!r} {op} needs an int or float, got {operand!r}")
    return {key: {op: operand}}


def _normalise(where: Any, depth: int, counter: list[int]) -> dict:
    if depth > MAX_DEPTH:
        raise _bad(f"nested deeper than {MAX_DEPTH} levels")
    if not isinstance(where, Mapping):
        raise _bad(f"expected a dict, got {type(where).__name__} {where!r}")
    if not where:
        raise _bad("empty dict inside $and/$or")
    if len(where) > 1:
        # Chroma wants exactly one key per dict: several keys mean "all of them".
        return _normalise({"$and": [{k: v} for k, v in where.items()]}, depth, counter)
    ((key, value),) = where.items()
    if not isinstance(key, str) or not key:
        raise _bad(f"keys must be non-empty strings, got {key!r}")
    if key in LOGICAL_OPS:
        if not isinstance(value, (list, tuple)) or not value:
            raise _bad(f"{key} needs a non-empty list of filters, got {value!r}")
        items = [_normalise(item, depth + 1, counter) for item in value]
        return items[0] if len(items) == 1 else {key: items}
    if key.startswith("$"):
        raise _bad(f"unknown operator {key!r} at filter level")
    if key.startswith("#"):
        # Chroma reserves '#document'/'#embedding' style keys; they are not metadata.
        raise _bad(f"key {key!r} is reserved by Chroma; filter on metadata keys only")
    counter[0] += 1
    if counter[0] > MAX_CLAUSES:
        raise _bad(f"more than {MAX_CLAUSES} clauses")
    if isinstance(value, Mapping):
        if not value:
            raise _bad(f"{key!r} has an empty operator dict")
        clauses = [_field_clause(key, op, operand) for op, operand in value.items()]
        counter[0] += len(clauses) - 1
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}
    return _field_clause(key, "$eq", value)


def validate_filter(where: Mapping | None) -> dict | None:
    """Check a filter and return its normalised form (what to pass to Chroma's `where=`).

    None or {} mean "no filter" and return None. Raises InvalidFilterError naming the problem.
    """
    if where is None:
        return None
    if isinstance(where, Mapping) and not where:
        return None
    return _normalise(where, 1, [0])


def and_filters(*filters: Mapping | None) -> dict | None:
    """AND several filters (None entries are ignored); the result is validated and normalised.

    Used for scoping: a caller's filter AND-ed with the scope can only narrow it.
    """
    parts = [f for f in (validate_filter(f) for f in filters) if f is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    flat: list[dict] = []
    for part in parts:
        flat.extend(part["$and"] if "$and" in part else [part])
    return validate_filter({"$and": flat})


def _equal(value: Any, operand: Any) -> bool:
    if isinstance(value, bool) or isinstance(operand, bool):
        return isinstance(value, bool) and isinstance(operand, bool) and value == operand
    if _is_number(value) and _is_number(operand):
        return value == operand
    return isinstance(value, str) and isinstance(operand, str) and value == operand


def _field_matches(op: str, operand: Any, metadata: Mapping, key: str) -> bool:
    if key not in metadata:
        return op in ("$ne", "$nin", "$not_contains")
    value = metadata[key]
    if isinstance(value, (list, tuple)):
        if op in CONTAINS_OPS:
            found = any(type(item) is type(operand) and item == operand for item in value)
            return found if op == "$contains" else not found
        return op in ("$ne", "$nin")
    if op == "$eq":
        return _equal(value, operand)
    if op == "$ne":
        return not _equal(value, operand)
    if op == "$in":
        return any(_equal(value, item) for item in operand)
    if op == "$nin":
        return not any(_equal(value, item) for item in operand)
    if op == "$contains":
        return False
    if op == "$not_contains":
        return True
    if not _is_number(value):
        return False
    if op == "$gt":
        return value > operand
    if op == "$gte":
        return value >= operand
    if op == "$lt":
        return value < operand
    return value <= operand  # $lte


def matches(where: dict | None, metadata: Mapping | None) -> bool:
    """Evaluate a filter returned by `validate_filter()` against one item's metadata."""
    if where is None:
        return True
    metadata = metadata or {}
    ((key, value),) = where.items()
    if key == "$and":
        return all(matches(item, metadata) for item in value)
    if key == "$or":
        return any(matches(item, metadata) for item in value)
    ((op, operand),) = value.items()
    return _field_matches(op, operand, metadata, key)


def equality_terms(where: dict | None) -> list[tuple[str, list[Any]]] | None:
    """Equality constraints that every match must satisfy, as (key, allowed values).

    Lets an index narrow candidates with a value lookup before running `matches()`.
    Returns None when the filter gives no such constraint (the caller must scan).
    """
    return (_equalities(where)[0] or None) if where is not None else None


def only_equalities(where: dict | None) -> bool:
    """True when `equality_terms(where)` says everything: a conjunction of `$eq`/`$in` only,
    so the equality index alone answers it and `matches()` has nothing left to check."""
    return where is not None and _equalities(where)[1]


def _equalities(where: dict) -> tuple[list[tuple[str, list[Any]]], bool]:
    """(the equality constraints every match must satisfy, whether they are the whole filter)."""
    ((key, value),) = where.items()
    if key == "$and":
        parts = [_equalities(item) for item in value]
        return [t for terms, _ in parts for t in terms], all(whole for _, whole in parts)
    if key == "$or":
        return [], False
    ((op, operand),) = value.items()
    if op == "$eq":
        return [(key, [operand])], True
    if op == "$in":
        return [(key, list(operand))], True
    return [], False
