"""Run the benchmarks and print their figures.

    python benchmarks/run.py             # every benchmarks/bench_*.py
    python benchmarks/run.py store       # only bench_store.py (names with or without bench_)
    python benchmarks/run.py store -- --quick   # arguments after -- go to each bench's main()

Each ``bench_*.py`` has a ``main(argv)`` (or ``main()``) that prints a table of figures.
Benchmarks print; they never assert (speed is not a test verdict).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def discover() -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, passthrough = args[:cut], args[cut + 1 :]
    found = discover()
    names = [a.removeprefix("bench_").removesuffix(".py") for a in args] or list(found)
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(found)}")
        return 2
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    for name in names:
        print(f"\n=== {name} ({found[name].name}) ===", flush=True)
        started = time.perf_counter()
        module = load(found[name])
        entry = module.main
        takes_args = bool(inspect.signature(entry).parameters)
        entry(passthrough) if takes_args else entry()
        print(f"--- {name}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
