"""How much a turn's saved output weighs in a notebook under git (issue 35, item 9).

    python benchmarks/bench_notebook_diff.py [--calls 1] [--keep DIR]

``--code DIR``: run the kernel with the package from DIR (a ``git archive`` of an older
commit, say) to print the figures of that code.

Runs a two-cell notebook headless (``openprogram run``'s ``run_notebook``, the offline
``test`` provider, a private ``OPENPROGRAM_HOME``): a setup cell and a ``%%openprogram``
cell making ``--calls`` LLM calls.  Prints

- the bytes the run added to the ``.ipynb`` (the cell's outputs: the turn's DAG and the
  reply) and the lines ``git diff`` counts for it;
- the lines ``git diff --numstat`` counts when the same notebook is run again and the
  cell reproduces its output (the reply is the same: only the turn's own parts change).

Targets: a one-call turn adds ≤ 3 KB; a re-run that reproduces its output changes ≤ 10
lines (added + removed).  Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETUP = "%load_ext openprogram_magics"


def cell_text(calls: int) -> str:
    lines = ["%%openprogram", "from openprogram import llm"]
    lines += [f'reply_{i} = llm("Say hello, number {i}.")' for i in range(calls)]
    return "\n".join(lines)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout


def numstat(cwd: Path) -> tuple[int, int]:
    """Lines added and removed in the working tree's notebook since the last commit."""
    out = git(cwd, "diff", "--numstat", "--", "nb.ipynb").split()
    return (int(out[0]), int(out[1])) if out else (0, 0)


def commit(cwd: Path, message: str) -> None:
    git(cwd, "add", "nb.ipynb")
    git(cwd, "-c", "user.name=bench", "-c", "user.email=b@x", "commit", "-qm", message)


def run(path: Path) -> None:
    from openprogram_magics.headless import run_notebook

    ran = run_notebook(path, timeout=300)
    if ran.error is not None:
        raise SystemExit(f"the notebook failed: {ran.error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1, help="LLM calls in the cell")
    parser.add_argument("--keep", type=Path, help="work in DIR and leave it (to look at)")
    parser.add_argument("--code", type=Path, default=REPO, help="the package's checkout")
    args = parser.parse_args()
    import nbformat

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-nbdiff-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["OPENPROGRAM_HOME"] = str(work / "home")
    os.environ["OPENPROGRAM_PROVIDER"] = "test"
    os.environ["GIT_AUTHOR_NAME"] = "Ada Lovelace"  # the turn's author is saved: one name
    os.environ["GIT_AUTHOR_EMAIL"] = "ada@example.org"
    paths = [str(args.code.resolve()), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    repo = work / "repo"
    repo.mkdir(exist_ok=True)
    git(repo, "init", "-q")
    path = repo / "nb.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(cell_text(args.calls))]
    nbformat.write(nb, path)
    run(path)  # once, so the notebook has its session id and the setup cell its output
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs = []
    nb.cells[1].execution_count = None
    nbformat.write(nb, path)
    commit(repo, "before the turn")
    before = path.stat().st_size
    run(path)
    added_bytes = path.stat().st_size - before
    plus, minus = numstat(repo)
    print(f"{args.calls}-call turn: +{added_bytes} bytes in the .ipynb", end=", ")
    print(f"git diff +{plus} -{minus} lines")
    commit(repo, "the turn")
    run(path)
    plus, minus = numstat(repo)
    print(f"re-run reproducing its output: git diff +{plus} -{minus} lines ({plus + minus} in all)")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"left in {work} (git -C {repo} log -p)")


if __name__ == "__main__":
    sys.exit(main())
