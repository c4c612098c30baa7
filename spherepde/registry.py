"""Named implementations chosen once, at construction: one registry design for every kind.

The interaction kernels (:data:`spherepde.interaction.KERNELS`: numpy, numba, torch, harmonic)
and the spherical-harmonic transform libraries (:data:`spherepde.transforms.sht.SHT_LIBRARIES`:
shtns, ducc0) are both a :class:`Registry`. An entry is registered

- eagerly, with its object (``registry.register("numpy", attention_numpy)``), optionally with a
  ``requires`` check that raises ImportError while the library behind it is missing; or
- lazily, by the module that defines it (``registry.register_module("numba",
  "spherepde.interaction.fused")``): the module is imported on first use and registers the
  entry itself, so that a heavy library (numba compiles, torch is slow to import) costs
  nothing until it is asked for.

>>> from spherepde.registry import Registry
>>> r = Registry("greeting")
>>> r.register("hello", lambda: "hi")
>>> r.get("hello")()
'hi'
>>> r.available()
['hello']
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

__all__ = ["Registry"]


class Registry:
    """Named implementations of one kind (e.g. "interaction kernel").

    Parameters
    ----------
    kind : str
        What the entries are, for error messages ("interaction kernel", "SHT library").
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._objects: dict[str, Any] = {}
        self._requires: dict[str, Callable[[], Any]] = {}
        self._modules: dict[str, str] = {}
        self._order: list[str] = []

    def _remember(self, name: str) -> None:
        if name not in self._order:
            self._order.append(name)

    def register(self, name: str, obj: Any = None, *,
                 requires: Callable[[], Any] | str | None = None):
        """Register ``obj`` under ``name``; without ``obj``, return a decorator that does.

        ``requires``: a module name, or a callable raising ImportError, checked at every
        :meth:`get` and :meth:`available` (so that a library made unimportable later, as in a
        test, is reported as missing).
        """
        if obj is None:
            def deco(o):
                self.register(name, o, requires=requires)
                return o
            return deco
        self._objects[name] = obj
        if requires is not None:
            self._requires[name] = ((lambda m=requires: importlib.import_module(m))
                                    if isinstance(requires, str) else requires)
        self._remember(name)
        return None

    def register_module(self, name: str, module: str) -> None:
        """Declare that importing ``module`` registers ``name`` (loaded on first use)."""
        self._modules[name] = module
        self._remember(name)

    def names(self) -> list[str]:
        """Every declared name, installed or not, in registration order."""
        return list(self._order)

    def _load(self, name: str) -> Any:
        """The object of ``name``; ImportError when its library is missing, KeyError when the
        name was never declared."""
        if name not in self._objects:
            module = self._modules.get(name)
            if module is None:
                raise KeyError(name)
            importlib.import_module(module)
            if name not in self._objects:
                raise ImportError(f"{module} did not register the {self.kind} {name!r}")
        check = self._requires.get(name)
        if check is not None:
            check()
        return self._objects[name]

    def get(self, name: str) -> Any:
        """The implementation registered as ``name``.

        Raises ValueError for an unknown name and ImportError when its library is missing,
        each listing what is available.
        """
        try:
            return self._load(name)
        except KeyError:
            raise ValueError(f"unknown or unavailable {self.kind} {name!r}; choose from "
                             f"{self.names()} (installed here: {self.available()})") from None
        except ImportError as exc:
            raise ImportError(f"the {self.kind} {name!r} is not installed ({exc}); available: "
                              f"{self.available()}") from None

    def installed(self, name: str) -> bool:
        """Whether ``name`` is declared and its implementation loads here."""
        try:
            self._load(name)
        except (KeyError, ImportError):
            return False
        return True

    def available(self) -> list[str]:
        """The names whose implementation loads here, in registration order."""
        return [name for name in self._order if self.installed(name)]

    def __contains__(self, name: str) -> bool:
        return name in self._order

    def check(self, name: str) -> str:
        """``name`` when it is declared (installed or not), else a ValueError that lists the
        declared names: for checking an argument before anything is built from it."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {sorted(self.names())}")
        return name

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"

