"""Build step: compile the pure model (conversion, validation) with mypyc, where it can be.

``pip install .`` and ``pip wheel .`` (the container image) compile the modules of
``trio_typha/model/`` listed by ``native_modules()`` into C extensions with mypyc when mypyc
imports and a C compiler and Python's headers are there; otherwise, or if compiling fails,
the wheel is pure Python and works the same, only slower (``trio_typha.native`` picks the
modules at import time and falls back to the sources when the extensions do not load).
``TRIO_TYPHA_COMPILE=0`` builds pure Python; ``TRIO_TYPHA_COMPILE=1`` insists (a failure is an
error, not a fallback) and also compiles an editable install, which is otherwise pure so
that ``pip install -e .`` stays quick and the sources stay what the tests run.

Why these modules: a start-up profile (KDD, 10k pods) spends about 45 % of its CPU in the
conversions and 14 % in validation; compiled, both take 0.55-0.65x the time, byte for byte
the same output (tests/unit/model/test_native_parity.py).  Left pure: ``goschema.py`` (a
generated table of Go struct layouts, read once; as C it is a 60 MB file that takes minutes
to compile for nothing) and ``selectors.py`` (its AST dataclasses derive from ``abc.ABC``,
which mypyc refuses at import time).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
#: Kept pure, see the module docstring.
PURE = frozenset({"__init__.py", "goschema.py", "selectors.py"})
#: The shared library mypyc puts every compiled module's code in (``<group>__mypyc``).
GROUP = "trio_typha_native"


def native_modules() -> list[str]:
    return sorted(str(p.relative_to(HERE)) for p in (HERE / "trio_typha" / "model").glob("*.py")
                  if p.name not in PURE)


def _why_not() -> str | None:
    """Why this build stays pure Python, or None to compile."""
    wanted = os.environ.get("TRIO_TYPHA_COMPILE", "")
    if wanted == "0":
        return "TRIO_TYPHA_COMPILE=0"
    if wanted != "1" and "editable_wheel" in sys.argv:
        return "an editable install (TRIO_TYPHA_COMPILE=1 compiles it too)"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(os.environ.get("CC", cc).split()[0]) is None:
        return f"no C compiler ({cc})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python.h (install the python3-dev package)"
    return None


class OptionalBuildExt(build_ext):
    """``build_ext`` whose failure leaves a pure-Python build, unless compiling was asked."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:
            if os.environ.get("TRIO_TYPHA_COMPILE") == "1":
                raise
            print(f"trio-typha: compiling the model failed ({e}); building pure Python",
                  file=sys.stderr)


def ext_modules() -> list:
    why = _why_not()
    if why is None:
        from mypyc.build import mypycify
        try:
            return mypycify(native_modules(), opt_level="3", group_name=GROUP)
        except BaseException as e:  # mypyc exits through SystemExit on a type error
            if os.environ.get("TRIO_TYPHA_COMPILE") == "1":
                raise
            why = f"mypyc failed: {e!r}"
    if why is not None and os.environ.get("TRIO_TYPHA_COMPILE") == "1":
        raise SystemExit(f"TRIO_TYPHA_COMPILE=1 but the model cannot be compiled: {why}")
    print(f"trio-typha: pure Python build ({why})", file=sys.stderr)
    return []


#: setup.py's commands that build code; the metadata steps (egg_info, dist_info) skip mypyc.
_BUILDS = frozenset({"build", "build_ext", "bdist_wheel", "editable_wheel", "install"})

if __name__ == "__main__":
    setup(ext_modules=ext_modules() if _BUILDS & set(sys.argv) else [],
          cmdclass={"build_ext": OptionalBuildExt})
