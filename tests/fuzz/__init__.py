"""Fuzz targets (atheris) of the socket frame parser and of every verb's arguments.

Each target module has ``one_input(data: bytes) -> None``: it raises
:class:`tests.fuzz.targets.Crash` (or any exception but the documented
:class:`actors.errors.Refused`) on a bug, and returns otherwise. ``python -m
tests.fuzz.run TARGET`` fuzzes it under atheris; ``tests/fuzz/test_replay.py``
replays the corpus and the crashers through the same functions without atheris.
"""
