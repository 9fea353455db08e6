"""One home for number checks: no hand-written ``isinstance(x, bool) or not isinstance(x, ...)``.

``isinstance(True, int)`` holds, so a check for an integer (or a real number) must refuse
bools itself. ``aioloader/core/_check.py`` does that once (``as_int``, ``at_least``,
``positive``, ``real``, ``instance_not_bool`` and the rest, exported by ``aioloader.core``),
with messages that name the argument, the rule and the value seen. Any other module of the
package that spells the pair out by hand fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "aioloader"
HOME = "core/_check.py"

# Modules other changes are moving to core's checks right now; this list is to be emptied.
CONVERTING: frozenset[str] = frozenset()


def _is_bool(kind: ast.expr) -> bool:
    """Whether an ``isinstance`` second argument is or holds ``bool`` (or ``np.bool_``)."""
    if isinstance(kind, ast.Tuple):
        return any(_is_bool(element) for element in kind.elts)
    return (isinstance(kind, ast.Name) and kind.id == "bool") or (
        isinstance(kind, ast.Attribute) and kind.attr == "bool_"
    )


def _isinstance_subject(node: ast.expr) -> tuple[str, ast.expr] | None:
    """``(dump of x, kinds)`` of a call ``isinstance(x, kinds)``, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
    ):
        return ast.dump(node.args[0]), node.args[1]
    return None


def hand_written_checks(source: str) -> list[int]:
    """Lines of ``isinstance(x, bool) or ... not isinstance(x, ...)`` (the same ``x``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)):
            continue
        refused = set()
        required = set()
        for value in node.values:
            call = _isinstance_subject(value)
            if call is not None and _is_bool(call[1]):
                refused.add(call[0])
            if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
                call = _isinstance_subject(value.operand)
                if call is not None:
                    required.add(call[0])
        if refused & required:
            lines.append(node.lineno)
    return sorted(lines)


def test_the_finder_sees_each_spelling_and_only_those() -> None:
    found = [
        "ok = isinstance(x, bool) or not isinstance(x, int)",
        "ok = isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1",
        "ok = any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in size)",
        "ok = isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number))",
        "ok = value is None or isinstance(value, np.bool_) or not isinstance(value, float)",
        "if n is not None and (isinstance(n, bool) or not isinstance(n, int)):\n    pass",
    ]
    assert [hand_written_checks(source) for source in found] == [[1]] * len(found)
    missed = [
        "ok = isinstance(x, bool) or isinstance(x, int)",  # no "not"
        "ok = isinstance(a, bool) or not isinstance(b, int)",  # two subjects
        "ok = isinstance(x, str) or not isinstance(x, int)",  # no bool
        "ok = not isinstance(x, int) and isinstance(x, bool)",  # an "and"
        "ok = flag(name, x) or not isinstance(x, int)",
    ]
    assert [hand_written_checks(source) for source in missed] == [[]] * len(missed)


def test_the_modules_being_converted_exist() -> None:
    assert sorted(name for name in CONVERTING if not (PACKAGE / name).is_file()) == []


def test_bool_refusing_checks_live_only_in_core_check() -> None:
    offending = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == HOME or name in CONVERTING:
            continue
        for line in hand_written_checks(path.read_text(encoding="utf-8")):
            offending.append(f"aioloader/{name}:{line}")
    assert not offending, (
        "check integers and numbers with aioloader.core's checks (as_int, at_least, "
        "at_least_or_none, positive, positive_up_to, real, instance_not_bool), not by hand: "
        + ", ".join(offending)
    )
