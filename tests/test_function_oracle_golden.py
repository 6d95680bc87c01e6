"""The bytes of plain data across the function oracle's pipes, pinned.

The encoding is part of sealed packs' grading: a pack sealed today is graded by a later
release's oracle, so what :func:`encode` writes, what :func:`decode` builds and the words of
every refusal must not change. ``tests/fixtures/function_oracle_golden.json`` holds them as
the oracle wrote them when this test was added; set ``SEALBENCH_WRITE_GOLDEN=1`` to write it
anew (only for a deliberate change of the format, which then needs a new spec version).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, OrderedDict, defaultdict, deque
from pathlib import Path
from typing import Any

import pytest

from sealbench.function_oracle import MAX_DEPTH, NotPlainData, decode, encode

GOLDEN = Path(__file__).parent / "fixtures" / "function_oracle_golden.json"


class Node:
    """A trusted class whose instances cross as arguments."""

    def __init__(self, value: Any, nxt: Any = None) -> None:
        self.value = value
        self.next = nxt


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _deep_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"k": value}
    return value


def _deep_node(depth: int) -> list[Any]:
    node: list[Any] = ["L"]
    for _ in range(depth):
        node = ["L", node]
    return node


# (id, value, whether trusted objects may cross)
ENCODED = [
    ("none", None, False), ("true", True, False), ("false", False, False), ("zero", 0, False),
    ("negative-int", -17, False), ("int-at-the-json-limit", 2**4000 - 1, False),
    ("int-past-the-json-limit", 2**4000, False), ("negative-large-int", -(3**3000), False),
    ("float", 0.1, False), ("negative-zero", -0.0, False), ("inf", math.inf, False),
    ("minus-inf", -math.inf, False), ("nan", math.nan, False), ("tiny-float", 5e-324, False),
    ("str", 'héllo\n"x"', False), ("empty-str", "", False), ("bytes", b"\x00\xffab", False),
    ("empty-bytes", b"", False), ("complex", complex(1.5, -2), False),
    ("complex-nan", complex(math.nan, math.inf), False),
    ("list", [1, "a", None], False), ("empty-list", [], False), ("tuple", (1, (2, 3)), False),
    ("empty-tuple", (), False), ("dict", {"b": 1, "a": [2], 3: (4,)}, False), ("empty-dict", {}, False),
    ("bool-keys", {True: 1, 0: "z"}, False), ("counter", Counter("abracadabra"), False),
    ("ordereddict", OrderedDict([(2, "b"), (1, "a")]), False), ("deque", deque([1, (2, 3), [4]]), False),
    ("defaultdict-list", defaultdict(list, {"a": [1], "b": []}), False),
    ("defaultdict-no-default", defaultdict(None, {1: 2}), False),
    ("defaultdict-int", defaultdict(int, {"x": 3}), False),
    ("set", {"b", "a", "c"}, False), ("mixed-set", {1, "1", (1, 2), None, 2.5, b"x", frozenset({3})}, False),
    ("frozenset", frozenset({3, 1, 2}), False), ("empty-set", set(), False),
    ("nested", {"k": [({1, 2}, frozenset()), Counter({"z": 2}), deque([b"q"]), complex(0, 1)]}, False),
    ("at-the-depth-limit", _deep(MAX_DEPTH - 1), False),
    ("builtin-type", int, True), ("builtin-type-object", object, True),
    ("builtin-types-in-a-list", [str, bytes, bool], True),
    ("trusted-object", Node(1, Node(2)), True), ("trusted-object-in-a-dict", {"n": Node("x")}, True),
]

# (id, value, whether trusted objects may cross, max_values)
REFUSED = [
    ("int-subclass", type("I", (int,), {})(3), False, None), ("str-subclass", type("S", (str,), {})("x"), False, None),
    ("list-subclass", type("L", (list,), {})(), False, None), ("object", object(), False, None),
    ("function", print, False, None), ("generator", (x for x in [1]), False, None),
    ("counter-subclass", type("MyCounter", (Counter,), {})(), False, None),
    ("defaultdict-lambda", defaultdict(lambda: 0), False, None),
    ("defaultdict-own-class", defaultdict(type("Mine", (), {})), False, None),
    ("builtin-type-without-objects", int, False, None), ("own-type", type("Mine", (), {}), True, None),
    ("untrusted-object", type("Node", (), {})(), True, None),
    ("trusted-object-without-objects", Node(1), False, None),
    ("nested-object", [1, [2, {3: object()}]], False, None), ("too-many-values", [1, 2, 3], False, 3),
    ("too-deep", _deep(MAX_DEPTH + 1), False, None), ("too-deep-dict", _deep_dict(MAX_DEPTH + 1), False, None),
]

# (id, node, whether objects are rebuilt)
DECODED = [
    ("int", 5, False), ("str", "x", False), ("none", None, False), ("float", 1.5, False),
    ("empty", [], False), ("unknown-tag", ["?"], False), ("int-head", [1, 2], False), ("object-node", {"a": 1}, False),
    ("tag-not-str", [None], False), ("bool-tag", [True], False),
    ("large-int-not-str", ["I", 5], False), ("large-int-bad-hex", ["I", "zz"], False), ("large-int", ["I", "-0x1f"], False),
    ("defaultdict-bad-default", ["F", 1.5], False), ("defaultdict-unknown-default", ["F", "lambda"], False),
    ("defaultdict", ["F", "list", "a", ["L", 1]], False), ("defaultdict-odd", ["F", None, 1], False),
    ("defaultdict-no-default", ["F", None, 1, 2], False),
    ("list-in-list", ["L", [5]], False), ("set-of-lists", ["E", ["L"]], False), ("set-of-dicts", ["Z", ["D"]], False),
    ("dict-list-key", ["D", ["L"], None], False), ("dict-odd", ["D", None], False),
    ("dict", ["D", "a", 1, 2, ["T", 3]], False), ("counter", ["K", "a", 2], False),
    ("ordereddict", ["R", 2, "b", 1, "a"], False), ("counter-odd", ["K", "a"], False),
    ("object-without-objects", ["O", "Node"], False), ("object", ["O", "Node", "value", 1, "next", None], True),
    ("object-bad-attribute", ["O", "Node", 1, 2], True), ("object-odd", ["O", "Node", "value"], True),
    ("object-name-not-str", ["O", 1], True), ("object-rebuild-fails", ["O", "Missing"], True),
    ("bytes-odd-hex", ["Y", "0"], False), ("bytes", ["Y", "00ff"], False), ("bytes-not-str", ["Y", 1], False),
    ("complex-str", ["C", "1", "2"], False), ("complex", ["C", 1, 2.5], False), ("complex-short", ["C", 1], False),
    ("builtin-without-objects", ["B", "int"], False), ("builtin", ["B", "int"], True),
    ("builtin-unknown", ["B", "eval"], True), ("builtin-extra", ["B", "int", 1], True),
    ("tuple", ["T", 1, ["L"], ["Z", 2, 1]], False), ("deque", ["Q", 1], False), ("set", ["E", 1, 1], False),
    ("at-the-depth-limit", _deep_node(MAX_DEPTH - 1), False), ("too-deep", _deep_node(MAX_DEPTH), False),
]


def _rebuild(name: str, attrs: dict[str, Any]) -> Any:
    if name == "Missing":  # as the worker does for a class the candidate module lacks
        raise TypeError(f"the candidate module has no class {name}")
    return ("rebuilt", name, attrs)


def _shape(value: Any) -> Any:
    """A value as JSON with every type spelled out (nan and -0.0 kept by repr)."""
    kind = type(value).__name__
    if isinstance(value, type):
        return ["type", value.__name__]
    if isinstance(value, dict):
        extra = [getattr(value.default_factory, "__name__", None)] if isinstance(value, defaultdict) else []
        return [kind, *extra, [[_shape(k), _shape(v)] for k, v in value.items()]]
    if isinstance(value, set | frozenset):
        return [kind, sorted(json.dumps(_shape(v)) for v in value)]
    if isinstance(value, list | tuple | deque):
        return [kind, [_shape(v) for v in value]]
    return [kind, repr(value)]


def _encoded(value: Any, objects: bool, max_values: int | None = None) -> str:
    try:
        node = encode(value, objects={"Node": Node} if objects else None,
                      **({} if max_values is None else {"max_values": max_values}))
    except NotPlainData as e:
        return f"refused: {e}"
    return json.dumps(node, separators=(",", ":"))  # as the frames carry it


def _decoded(node: Any, objects: bool) -> Any:
    try:
        return _shape(decode(node, objects=_rebuild if objects else None))
    except NotPlainData as e:
        return f"refused: {e}"


def _current() -> dict[str, Any]:
    return {"encoded": {name: _encoded(value, objects) for name, value, objects in ENCODED},
            "refused": {name: _encoded(value, objects, most) for name, value, objects, most in REFUSED},
            "decoded": {name: _decoded(node, objects) for name, node, objects in DECODED}}


if os.environ.get("SEALBENCH_WRITE_GOLDEN") == "1":
    GOLDEN.write_text(json.dumps(_current(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
WRITTEN = json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("name", "value", "objects"), ENCODED, ids=[c[0] for c in ENCODED])
def test_encoded_bytes_are_those_sealed_packs_were_graded_with(name: str, value: Any, objects: bool) -> None:
    assert _encoded(value, objects) == WRITTEN["encoded"][name]


@pytest.mark.parametrize(("name", "value", "objects", "most"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refusals_to_encode_keep_their_words(name: str, value: Any, objects: bool, most: int | None) -> None:
    assert _encoded(value, objects, most) == WRITTEN["refused"][name]
    assert WRITTEN["refused"][name].startswith("refused: ")


@pytest.mark.parametrize(("name", "node", "objects"), DECODED, ids=[c[0] for c in DECODED])
def test_decoded_values_and_refusals_are_as_before(name: str, node: Any, objects: bool) -> None:
    assert _decoded(node, objects) == WRITTEN["decoded"][name]


@pytest.mark.parametrize(("name", "value", "objects"), ENCODED, ids=[c[0] for c in ENCODED])
def test_every_encoded_value_decodes_to_its_own_shape(name: str, value: Any, objects: bool) -> None:
    node = json.loads(_encoded(value, objects))
    back = decode(node, objects=(lambda n, a: Node(**{"nxt" if k == "next" else k: v for k, v in a.items()}))
                  if objects else None)
    assert json.dumps(encode(back, objects={"Node": Node} if objects else None),
                      separators=(",", ":")) == _encoded(value, objects)


def test_the_golden_file_covers_every_case() -> None:
    assert set(WRITTEN["encoded"]) == {c[0] for c in ENCODED}
    assert set(WRITTEN["refused"]) == {c[0] for c in REFUSED}
    assert set(WRITTEN["decoded"]) == {c[0] for c in DECODED}
