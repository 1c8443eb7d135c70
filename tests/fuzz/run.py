"""Run a fuzz target under atheris (libFuzzer): ``python -m tests.fuzz.run TARGET [ARGS]``.

``TARGET`` is a name of :data:`tests.fuzz.paths.TARGETS` (``framing``,
``args``). ``ARGS`` go to libFuzzer (``-max_total_time=3600``, ``-runs=N``,
``-jobs``...). Unless given, the target's corpus directory
``tests/fuzz/corpus/TARGET/`` is the corpus (new inputs that reach new code are
added to it), ``tests/fuzz/json.dict`` the
dictionary, and a crash is written to
``tests/fuzz/crashers/TARGET-crash-<sha1>`` for ``tests/fuzz/test_replay.py``.

The daemon's own packages (``daemon``, ``actors``) are instrumented for
coverage; the test helpers and third-party code are not.
"""

from __future__ import annotations

import importlib
import sys

from tests.fuzz.paths import CORPUS, CRASHERS, DICTIONARY, TARGETS


def main(argv: list[str]) -> int:
    """Fuzz ``argv[0]`` with the libFuzzer arguments ``argv[1:]``; never returns on a crash."""
    import atheris  # only here: the targets and their replay need no atheris

    if not argv or argv[0] not in TARGETS:
        print(f"usage: python -m tests.fuzz.run {{{','.join(TARGETS)}}} [libFuzzer args]")
        return 2
    name, extra = argv[0], argv[1:]
    with atheris.instrument_imports(include=["daemon", "actors"]):
        module = importlib.import_module(TARGETS[name])
    args = [f"tests.fuzz.run:{name}", *extra]
    if not any(a.startswith("-artifact_prefix=") for a in extra):
        CRASHERS.mkdir(exist_ok=True)
        args.append(f"-artifact_prefix={CRASHERS}/{name}-")
    if not any(a.startswith("-dict=") for a in extra):
        args.append(f"-dict={DICTIONARY}")
    if not any(not a.startswith("-") for a in extra):
        corpus = CORPUS / name
        corpus.mkdir(parents=True, exist_ok=True)
        args.append(str(corpus))
    atheris.Setup(args, module.one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
