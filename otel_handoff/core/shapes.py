"""Feature checks that read a release's compiled code, never its source.

A release installed without ``.py`` files (compiled with ``compileall`` and the sources removed,
frozen into an executable, zipped) has no source for ``inspect.getsource`` to read: it raises
``OSError``. Its code objects are always there, so the checks that ask "does this method still
store ``self._runner``" or "does this module still say X" read names, constants and the order of
loads from them instead, and such an install is instrumented when its shapes hold.
"""

from __future__ import annotations

import dis
import inspect
from collections.abc import Iterator
from types import CodeType, ModuleType
from typing import Any

# instructions that put a name on the stack: globals, attributes, methods, locals, closures
_LOADS = frozenset(
    {
        "LOAD_GLOBAL",
        "LOAD_NAME",
        "LOAD_ATTR",
        "LOAD_METHOD",
        "LOAD_FAST",
        "LOAD_FAST_CHECK",
        "LOAD_FAST_AND_CLEAR",
        "LOAD_FAST_LOAD_FAST",
        "LOAD_FAST_BORROW",
        "LOAD_FAST_BORROW_LOAD_FAST_BORROW",
        "LOAD_DEREF",
        "LOAD_CLOSURE",
    }
)


def code_of(obj: Any) -> CodeType | None:
    """The code object of a function, method, decorated function or module; None when it has none."""
    if isinstance(obj, CodeType):
        return obj
    if isinstance(obj, ModuleType):
        loader = getattr(getattr(obj, "__spec__", None), "loader", None)
        get_code = getattr(loader, "get_code", None)
        return get_code(obj.__name__) if get_code is not None else None
    try:
        obj = inspect.unwrap(obj)
    except ValueError:  # a cycle of __wrapped__
        return None
    obj = getattr(obj, "__func__", obj)  # a bound or class method
    code = getattr(obj, "__code__", None)
    return code if isinstance(code, CodeType) else None


def _codes(code: CodeType | None) -> Iterator[CodeType]:
    """``code`` and every code object nested in it (functions, classes, comprehensions)."""
    if code is None:
        return
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def code_names(obj: Any) -> frozenset[str]:
    """Every global and attribute name ``obj``'s code reads or writes, nested code included."""
    return frozenset(name for code in _codes(code_of(obj)) for name in code.co_names)


def holds_text(obj: Any, text: str) -> bool:
    """Does a string constant of ``obj``'s code, nested code included, contain ``text``? (An
    f-string's literal parts, and literals written side by side, are one constant or several.)"""
    return any(
        isinstance(const, str) and text in const for code in _codes(code_of(obj)) for const in code.co_consts
    )


def loads_in_sequence(obj: Any, *names: str) -> bool:
    """Does ``obj``'s code load ``names`` one right after the other (``ctx.store`` is
    ``"ctx", "store"``; ``getattr(self, method_name`` is ``"getattr", "self", "method_name"``)?"""
    for code in _codes(code_of(obj)):
        loaded: list[str] = []
        for instruction in dis.get_instructions(code):
            if instruction.opname in _LOADS:
                value = instruction.argval
                loaded += value if isinstance(value, tuple) else [value]
        width = len(names)
        if any(tuple(loaded[i : i + width]) == names for i in range(len(loaded) - width + 1)):
            return True
    return False
