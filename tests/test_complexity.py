"""The complexity gate (tests/complexity.py): what it counts, and that its list only shrinks."""

from __future__ import annotations

from pathlib import Path

import pytest

from complexity import judge, measure, problems

BRANCHY = "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(30)) + "    return -1\n"


def test_the_source_passes_the_gate() -> None:
    assert problems() == []


def test_functions_methods_and_nested_functions_are_each_counted(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        "class A:\n    def m(self, x):\n        def inner(y):\n            return 1 if y else 2\n"
        "        return inner(x) if x else 0\n" + BRANCHY)
    found = {key: complexity for key, (complexity, _) in measure(tmp_path, tmp_path).items()}
    assert found == {"pkg.mod:A.m": 2, "pkg.mod:A.m.inner": 2, "pkg.mod:f": 31}


@pytest.mark.parametrize(("complexity", "allowed", "says"), [
    (25, {}, None),
    (26, {}, "over 25: split it"),
    (30, {"m:f": 31}, None),
    (30, {"m:f": 30}, None),
    (31, {"m:f": 30}, "more than the 30 it is listed with"),
    (25, {"m:f": 30}, "down to 25: take it off"),
    (3, {"m:f": 30}, "down to 3: take it off"),
])
def test_a_function_over_the_limit_must_be_listed_and_a_listed_one_may_only_come_down(
        complexity: int, allowed: dict[str, int], says: str | None) -> None:
    found = judge({"m:f": (complexity, "m.py:1")}, 25, allowed)
    assert (found == []) if says is None else (len(found) == 1 and says in found[0]), found


def test_a_listed_function_that_is_gone_must_be_taken_off_the_list() -> None:
    assert judge({}, 25, {"m:gone": 40}) == [
        "m:gone is listed in [tool.sealbench.complexity.allow] but no longer exists: take it off"]
