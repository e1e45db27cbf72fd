"""Which tests the service orders against each other: the keys of ``_checks``.

A plain run of test A is held while a split run of test B is open whenever
``needed_keys(B)`` and ``held_keys(A)`` meet. The run order itself is checked
with real workers in tests/hostile/test_run_channels.py; these are the keys.
"""

from __future__ import annotations

import pytest

from evalsweep.execution import _checks

HUMANEVAL_STYLE = '''
METADATA = {"author": "jt", "dataset": "test"}


def check(candidate):
    """The checks."""
    assert candidate([1, 2, 3]) == 6
    assert candidate([]) == 0, "This prints if this assert fails 1 (good for debugging!)"
    assert True, "This prints if this assert fails 2 (also good for debugging!)"
'''


def shares(waiting: str, learning: str) -> bool:
    """Would a plain run of ``waiting`` be held for a split run of ``learning``?"""
    return bool(_checks.held_keys(waiting) & _checks.needed_keys(learning))


@pytest.mark.parametrize(
    "copy",
    [
        HUMANEVAL_STYLE.replace("    assert", "    # a comment\n\n    assert"),
        HUMANEVAL_STYLE.replace("candidate", "f"),
        "def check(g):\n    assert 2 * 3 == g([1, 2, 3])\n",  # folded, reversed
        "def check(g):\n    assert g([]) == 0, 'the empty sum'\n",  # another message
        "def check(g):\n    for xs, total in [([], 0)]:\n        assert g(xs) == total\n",
        "assert total([1, 2, 3]) == 6\nassert total([4]) == 4\n",  # MBPP style, one more
        "def check(g):\n    assert not g([1, 2, 3]) != 6\n",  # the same values, another check
    ],
)
def test_a_test_written_otherwise_shares_a_check_both_ways(copy: str) -> None:
    assert shares(HUMANEVAL_STYLE, copy)
    assert shares(copy, HUMANEVAL_STYLE)


def test_a_test_is_ordered_against_itself_with_no_constant_at_all() -> None:
    bare = "def check(candidate):\n    assert candidate(True) is None\n"
    assert _checks.needed_keys(bare) == _checks.held_keys(bare) == {("test", bare)}
    assert shares(bare, bare)


@pytest.mark.parametrize(
    "other",
    [
        # Shares only what checks nothing: METADATA, a docstring, an assert of a constant.
        HUMANEVAL_STYLE.replace("[1, 2, 3]) == 6", "[5]) == 5").replace("[]) == 0", "[7]) == 7"),
        "def check(candidate):\n    assert candidate(3) == 9\n",
        "def check(candidate):\n    assert candidate('[1, 2, 3]') == '6'\n",  # other types
    ],
)
def test_tests_that_check_other_values_are_not_held_for_each_other(other: str) -> None:
    assert not shares(HUMANEVAL_STYLE, other)
    assert not shares(other, HUMANEVAL_STYLE)


def test_what_a_plain_run_holds_includes_what_checks_nothing() -> None:
    """A value a test never reads can still be one another test checks."""
    unread = 'UNUSED = "a secret"\n\ndef check(candidate):\n    assert candidate(1) == 1\n'
    reader = 'def check(candidate):\n    assert candidate(1) == "a secret"\n'
    spread = 'def check(candidate):\n    x = "a secret"\n    assert candidate(2) == x\n'
    assert ("str", "a secret") not in set().union(*_checks.needed_keys(unread) - {("test", unread)})
    assert shares(unread, spread)
    assert not shares(unread, reader)  # the values are spread otherwise: stated, not linked
    two_in_one = "def check(g):\n    assert g([1, 2, 3]) == 6 and g([]) == 0\n"
    assert not shares(HUMANEVAL_STYLE, two_in_one)  # stated, not linked


@pytest.mark.parametrize(
    "test",
    [
        "def check(candidate):\n    assert candidate(\n",  # does not compile
        "x = " + "(" * 400 + "1" + ")" * 400 + "\n",  # too deep for the parser
        "x = " + "-" * 100_000 + "1\n",  # too deep for the compiler
        "def check(candidate):\n    assert candidate(1) == float('nan')\n    y = 1e999\n",
        "def check(candidate):\n    assert candidate(10 ** 5000 + 1) == 1j\n",
        "async def check(candidate):\n    assert await candidate(3) == (yield 4)\n",
        "def check(candidate):\n    assert candidate('\\ud800\\x00') == b'\\xff'\n",
    ],
)
def test_any_test_gets_keys_and_one_of_them_is_its_own(test: str) -> None:
    keys = _checks.needed_keys(test)
    assert ("test", test) in keys
    assert keys <= _checks.held_keys(test)
    assert shares(test, test)


def test_nan_and_big_numbers_are_keyed_by_value() -> None:
    nan = "def check(c):\n    assert c(float('nan')) == 10 ** 5000\n"
    other_nan = "def check(d):\n    assert d(float('nan')) == 10 ** 5000\n"
    assert shares(nan, other_nan)
    assert not shares(nan, other_nan.replace("5000", "5001"))
