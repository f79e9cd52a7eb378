"""Which build of the model this process runs: mypyc's compiled modules, or the sources.

A wheel built where a C compiler was found carries ``trio_typha/model/*.so`` next to the
``.py`` files (``setup.py``); Python's importer prefers the extension.  This module runs once,
from ``trio_typha/model/__init__.py``, before any model module is imported, and makes the model's
modules load from their ``.py`` sources instead when

* ``TRIO_TYPHA_PURE=1`` asks for it (to compare the builds, or to rule the compiled one out),
* or the compiled modules are there but do not load (their shared library is missing or was
  built for another interpreter): the sources work the same, only slower.

``STATE`` says which happened; ``trio-typha serve`` logs it once at start-up.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

#: The package whose modules setup.py may compile, and mypyc's shared library for them.
PACKAGE = "trio_typha.model"
GROUP_LIBRARY = "trio_typha_native__mypyc"


@dataclass(frozen=True)
class NativeState:
    compiled: bool
    why: str  # what decided it, for the start-up log line

    def describe(self) -> str:
        build = "compiled with mypyc" if self.compiled else "pure Python"
        return f"model modules: {build} ({self.why})"


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``trio_typha.model.*`` as ``.py`` sources, passing over compiled extensions."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE + ".") or path is None:
            return None
        name = fullname.rpartition(".")[2]
        for entry in path:
            source = os.path.join(entry, name + ".py")
            if os.path.isfile(source):
                loader = importlib.machinery.SourceFileLoader(fullname, source)
                return importlib.util.spec_from_file_location(fullname, source, loader=loader)
        return None


def _decide(env: Mapping[str, str]) -> NativeState:
    if env.get("TRIO_TYPHA_PURE", "") not in ("", "0"):
        return NativeState(False, "TRIO_TYPHA_PURE is set")
    if importlib.util.find_spec(GROUP_LIBRARY) is None:
        return NativeState(False, "this install was built without a C compiler or mypyc")
    try:
        importlib.import_module(GROUP_LIBRARY)
    except ImportError as e:
        return NativeState(False, f"the compiled modules do not load: {e}")
    return NativeState(True, GROUP_LIBRARY)


def install(env: Mapping[str, str] | None = None) -> NativeState:
    """Decide, and when the answer is the sources, put the source finder first."""
    state = _decide(os.environ if env is None else env)
    if not state.compiled and not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())
    return state


def compiled_modules() -> list[str]:
    """The model modules this process imported from compiled extensions (for tests)."""
    return sorted(name for name, module in list(sys.modules.items())
                  if name.startswith(PACKAGE + ".")
                  and isinstance(getattr(module, "__loader__", None),
                                 importlib.machinery.ExtensionFileLoader))


STATE = install()
