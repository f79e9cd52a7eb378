"""Calico's data model: what each syncer serves, as serialized keys and values (pure code)."""

# Before any module of this package is imported: compiled (mypyc) or source modules.  Not
# pure (it reads TRIO_TYPHA_PURE); the package's modules are, and it imports none of them.
from .. import native as _native  # noqa: E402,F401
