"""The errors' one tree (issue 20 item 7): every exception class the project defines lives
in ``openprogram/errors.py``, under one of its families, and the old import paths still
name the same classes."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import openprogram.errors as errors

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = (errors.UserError, errors.SessionError, errors.RunError, errors.InternalError)


def project_exception_classes() -> list[type]:
    """Every exception (and warning) class the project's modules define, all imported."""
    import openprogram
    import openprogram_magics

    for package in (openprogram, openprogram_magics):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name != "openprogram_magics.papermill_engine":  # loaded by papermill's
                importlib.import_module(info.name)  # entry points, not by import

    def below(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *below(sub))]

    return [
        c
        for c in set(below(BaseException))
        if c.__module__.split(".")[0] in ("openprogram", "openprogram_magics")
    ]


def test_every_exception_class_is_defined_in_errors_py() -> None:
    outside = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in project_exception_classes()
        if c.__module__ != "openprogram.errors" and not c.__name__.startswith("_")
    )
    assert outside == []


def test_every_error_sits_under_one_family_and_the_tree_is_documented() -> None:
    classes = [
        c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, BaseException)
    ]
    for cls in classes:
        if cls in (errors.OpenProgramError, *FAMILIES):
            continue
        if issubclass(cls, errors.OpenProgramError):
            assert issubclass(cls, FAMILIES), cls
        else:  # the documented exceptions: a stop is not an error, a warning is not raised
            assert issubclass(cls, KeyboardInterrupt | Warning), cls
        assert cls.__name__ in (errors.__doc__ or ""), f"{cls.__name__} missing from the tree"


def test_the_old_import_paths_name_the_same_classes() -> None:
    """The facades and the modules that raise an error name the class of ``errors``
    (``agentic_programming.provider`` no longer offers ``ProviderError``: decision 0052)."""
    old = [
        ("openprogram.store.session.sync", "SyncError"),
        ("openprogram.providers.base", "ProviderError"),
        ("openprogram.providers.base", "TransientProviderError"),
        ("openprogram.providers.replay", "ReplayMiss"),
        ("openprogram.agentic_programming.stopping", "RunStopped"),
        ("openprogram.usage.budget", "BudgetExceeded"),
        ("openprogram.agent.process_runner", "ProcessRunError"),
        ("openprogram_magics.notebook", "MetadataError"),
        ("openprogram.cli", "CliError"),
    ]
    for module, name in old:
        assert getattr(importlib.import_module(module), name) is getattr(errors, name)
