"""Every corpus input and every crasher, replayed through its fuzz target without atheris.

A crasher (``tests/fuzz/crashers/<target>-crash-<sha1>``, written by ``python -m
tests.fuzz.run``) stays here after its fix, so the bug it found stays fixed. The
seed corpus is checked too: every verb of the table has a valid request in
:mod:`tests.fuzz.seeds`, and the seed files and the dictionary on disk are current.
"""

from __future__ import annotations

import copy
import importlib
from pathlib import Path

import pytest

from daemon.verbs import VERBS
from daemon.verbs.args import structure
from tests.fuzz import seeds
from tests.fuzz.paths import CORPUS, CRASHERS, DICTIONARY, TARGETS


def _inputs() -> list[tuple[str, Path]]:
    found = []
    for target in TARGETS:
        found += [(target, p) for p in sorted((CORPUS / target).glob("*"))]
        found += [(target, p) for p in sorted(CRASHERS.glob(f"{target}-*"))]
    return found


INPUTS = _inputs()


@pytest.mark.parametrize(
    ("target", "path"), INPUTS, ids=[f"{t}/{p.parent.name}/{p.name}" for t, p in INPUTS]
)
def test_replay(target: str, path: Path) -> None:
    module = importlib.import_module(TARGETS[target])
    module.one_input(path.read_bytes())


def test_there_is_a_corpus_for_every_target() -> None:
    for target in TARGETS:
        assert len(list((CORPUS / target).glob("seed-*"))) >= len(VERBS), target


def test_every_verb_has_valid_seeds() -> None:
    assert set(seeds.SEEDS) == set(VERBS)
    for op, examples in seeds.SEEDS.items():
        for example in examples:
            args = copy.deepcopy(example)
            args.pop("namespace", None)
            args.pop("answer", None)
            assert isinstance(structure(args, VERBS[op].args), VERBS[op].args), (op, example)


def test_the_seed_files_and_dictionary_are_current() -> None:
    """``python -m tests.fuzz.seeds`` rewrites them after a change of :mod:`tests.fuzz.seeds`."""
    for target, files in seeds.corpus().items():
        on_disk = {p.name: p.read_bytes() for p in (CORPUS / target).glob("seed-*")}
        assert on_disk == files, target
    assert DICTIONARY.read_text() == seeds.dictionary()
