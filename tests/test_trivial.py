"""Trivial candidates: the stub found exactly, and each candidate does what its name says."""

from __future__ import annotations

from typing import Any

import pytest

from sealbench.trivial import find_stubs, trivial_candidates

HUMANEVAL_STUB = '''from typing import List


def helper(x: int) -> int:
    """Not a stub: it has a body."""
    return x + 1


def sort_third(l: list, café: str = "é"):
    """Sort every third item.
    >>> sort_third([1, 2, 3])
    [1, 2, 3]
    """
    raise NotImplementedError
'''
MBPP_STUB = '''class Pair(object):
    def __init__(self, a, b):
        self.a = a
        self.b = b


def max_chain_length(arr, n):
    raise NotImplementedError


def other(): raise NotImplementedError("one line")
'''


def call(text: str, name: str, *args: Any) -> Any:
    ns: dict[str, Any] = {}
    exec(compile(text, "solution.py", "exec"), ns)
    return ns[name](*args)


def test_stubs_are_the_functions_whose_body_only_raises_not_implemented() -> None:
    assert [s.name for s in find_stubs("a.py", HUMANEVAL_STUB)] == ["sort_third"]
    assert [(s.name, s.first_arg) for s in find_stubs("b.py", MBPP_STUB)] == [("max_chain_length", "arr"),
                                                                             ("other", None)]
    method = "class A:\n    def m(self, x):\n        raise NotImplementedError()\n"
    assert [(s.name, s.first_arg) for s in find_stubs("c.py", method)] == [("m", "x")]
    imports_first = 'def max_fill(grid, capacity):\n    import math\n    """Doc."""\n    raise NotImplementedError\n'
    assert [s.name for s in find_stubs("f.py", imports_first)] == ["max_fill"]
    assert find_stubs("d.py", "def f():\n    raise ValueError\n") == []
    assert find_stubs("g.py", "def f():\n    x = 1\n    raise NotImplementedError\n") == []
    assert find_stubs("e.py", "def f(:\n") == []


def test_function_level_candidates_return_what_their_names_say() -> None:
    texts = {"solution.py": HUMANEVAL_STUB}
    cands = trivial_candidates(texts, function_level=True, returned={"sort_third": ["list"]})
    assert [c.name for c in cands] == ["returns None", "returns its first argument", "returns []"]
    none, first, const = (c.files["solution.py"] for c in cands)
    assert call(none, "sort_third", [3, 2, 1]) is None
    assert call(first, "sort_third", [3, 2, 1]) == [3, 2, 1]
    assert call(const, "sort_third", [3, 2, 1]) == []
    # Everything but the raise is kept, docstring and helpers included.
    assert const.replace("return []", "raise NotImplementedError") == HUMANEVAL_STUB


def test_bool_results_try_both_constants_and_multi_function_stubs_name_each() -> None:
    cands = trivial_candidates({"solution.py": MBPP_STUB}, function_level=True,
                               returned={"max_chain_length": ["bool", "int"]})
    names = [c.name for c in cands]
    assert names == ["returns None", "returns its first argument", "returns False from max_chain_length",
                     "returns True from max_chain_length", "returns 0 from max_chain_length"]
    assert call(cands[1].files["solution.py"], "other") is None
    assert call(cands[3].files["solution.py"], "max_chain_length", [], 0) is True


def test_repository_tasks_get_only_the_stub_with_its_raise_removed() -> None:
    cands = trivial_candidates({"pkg/mod.py": MBPP_STUB, "pkg/other.py": "X = 1\n"}, function_level=False)
    assert [c.name for c in cands] == ["the stub's raise removed (returns None)"]
    assert list(cands[0].files) == ["pkg/mod.py"]
    assert call(cands[0].files["pkg/mod.py"], "max_chain_length", [1], 1) is None


@pytest.mark.parametrize("text", ["X = 1\n", "def f(x):\n    return x\n", "not python("])
def test_a_task_without_a_stub_has_no_trivial_candidate(text: str) -> None:
    assert trivial_candidates({"solution.py": text}, function_level=True, returned={"f": ["int"]}) == []
