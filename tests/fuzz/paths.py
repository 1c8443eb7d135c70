"""Where the fuzz targets live and keep their inputs (imports nothing of the daemon,
so that :mod:`tests.fuzz.run` can instrument the daemon's modules as it imports them)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
#: ``corpus/<target>/``: inputs that reach new code, seeded by :mod:`tests.fuzz.seeds`.
CORPUS = HERE / "corpus"
#: The libFuzzer dictionary (``-dict``) of both targets, written by :mod:`tests.fuzz.seeds`.
DICTIONARY = HERE / "json.dict"
#: Inputs that crashed a target: each is replayed by ``test_replay.py`` forever after.
CRASHERS = HERE / "crashers"

#: Target name -> module under this package.
TARGETS = {"framing": "tests.fuzz.fuzz_framing", "args": "tests.fuzz.fuzz_args"}
