"""docs/SPEC-TRACE.md holds every SPEC id, and every test it names exists.

The acceptance table of issue #16: SPEC id | tests | what they assert. SPEC.md
lies in ``../shared`` beside the checkout (as ``../shared/compat`` does for
tests/test_compat_corpora.py); missing, this fails naming it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
SPEC = (CHECKOUT.parent / "shared" / "SPEC.md").resolve()
TRACE = CHECKOUT / "docs" / "SPEC-TRACE.md"

_ROW = re.compile(r"^\| (S-[A-Z]+-\d+) \| (.*?) \| (.*) \|$", re.M)
_TEST = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _spec_ids() -> list[str]:
    if not SPEC.is_file():
        pytest.fail(f"SPEC.md is not at {SPEC}: check out shared/ beside this repository")
    return re.findall(r"^- (S-[A-Z]+-\d+) ", SPEC.read_text(), re.M)


def _rows() -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    for spec_id, tests, what in _ROW.findall(TRACE.read_text()):
        assert spec_id not in rows, f"{spec_id} has two rows in {TRACE}"
        rows[spec_id] = (tests, what)
    return rows


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def test_every_spec_id_has_exactly_one_row_and_no_row_is_invented() -> None:
    ids = _spec_ids()
    assert len(ids) == len(set(ids)) and len(ids) > 50
    rows = _rows()
    assert [i for i in ids if i not in rows] == [], "ids of SPEC.md missing from the trace"
    assert [i for i in rows if i not in ids] == [], "rows for ids SPEC.md does not have"


def test_every_row_names_existing_tests_and_what_they_assert() -> None:
    names: dict[Path, set[str]] = {}
    for spec_id, (tests, what) in _rows().items():
        cited = _TEST.findall(tests)
        assert cited, f"{spec_id}: no test named"
        assert what.strip() and what.strip().lower() != "none", f"{spec_id}: say what is asserted"
        for file, name in cited:
            path = CHECKOUT / file
            assert path.is_file(), f"{spec_id}: {file} does not exist"
            if path not in names:
                names[path] = _test_names(path)
            assert name in names[path], f"{spec_id}: {file} has no {name}"
