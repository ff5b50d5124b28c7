"""The contract between a benchmark application and everything that runs or projects it.

An app is *data*: :meth:`App.plan` returns the OpenCL source, the initial buffers and the
ordered list of launches, so that the timing harness, the C hosts' Python twins, and the
projector's emulator all see exactly the same kernels and NDRanges. No app hides work in
pyopencl helpers; every kernel that runs is in ``Plan.source``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

APPS_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Launch:
    """One ``clEnqueueNDRangeKernel``.

    ``args`` entries: ``("buf", name)`` (a buffer of the plan), ``("scalar", np.int32(3))``
    (a numpy scalar, passed by value) or ``("local", nbytes)`` (dynamic ``__local`` memory).
    """

    kernel: str
    args: list
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None


@dataclass
class Plan:
    """Everything needed to run an app once; buffers persist across launches, in order."""

    source: str
    options: str
    buffers: dict[str, np.ndarray]
    launches: list[Launch]
    outputs: list[str]
    size: Any = None  # the resolved size value (int or tuple), for reports
    meta: dict[str, Any] = field(default_factory=dict)  # app-specific facts the reference needs


def load_source(filename: str) -> str:
    """OpenCL C source of ``benchmarks/apps/<filename>``, shared with the C hosts."""
    with open(os.path.join(APPS_DIR, filename), encoding="utf-8") as fh:
        return fh.read()


def assert_close(
    name: str, got: np.ndarray, want: np.ndarray, rtol: float = 0.0, atol: float = 0.0
) -> None:
    """Element-wise ``|got - want| <= atol + rtol * |want|`` with a message naming the worst element."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {got.shape} != expected {want.shape}")
    if rtol == 0.0 and atol == 0.0:
        bad = got != want
    else:
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(g - w) <= atol + rtol * np.abs(w))
    n_bad = int(np.count_nonzero(bad))
    if n_bad:
        idx = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
        raise AssertionError(
            f"{name}: {n_bad} of {bad.size} elements differ from the numpy reference "
            f"(first at index {tuple(int(i) for i in idx)}: got {got[idx]!r}, expected {want[idx]!r}; "
            f"rtol={rtol}, atol={atol})"
        )


class App:
    """Base class: subclasses set the class attributes and implement ``_plan``/``reference``.

    ``sizes`` maps a label to a size value; paper apps use ``"paper"``, others ``"default"``
    (asking a non-paper app for ``"paper"`` gives its ``"default"``, so the harness can run
    every app "at paper sizes"). ``"small"`` keeps tests fast.
    """

    name: str = ""
    description: str = ""
    paper: bool = False
    stresses: str = ""
    sizes: ClassVar[dict[str, int | tuple]] = {}
    requires: tuple[str, ...] = ()  # OpenCL extensions the device must report
    rtol: float = 0.0
    atol: float = 0.0
    atol_rel: float = 0.0  # absolute tolerance as a fraction of the output's largest magnitude

    def resolve_size(self, size: str | int | tuple) -> int | tuple:
        if isinstance(size, str):
            if size in self.sizes:
                return self.sizes[size]
            if size in ("paper", "default"):
                return self.sizes["paper" if "paper" in self.sizes else "default"]
            raise KeyError(f"{self.name}: unknown size label {size!r} (have {sorted(self.sizes)})")
        return size

    def plan(self, size_label_or_value: str | int | tuple = "small", seed: int = 0) -> Plan:
        value = self.resolve_size(size_label_or_value)
        plan = self._plan(value, np.random.default_rng(seed))
        plan.size = value
        return plan

    def _plan(self, size: Any, rng: np.random.Generator) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(
        self,
        plan: Plan,
        outputs: dict[str, np.ndarray],
        reference: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Raise ``AssertionError`` unless every output matches the reference within tolerance.

        ``reference`` may be passed in when it was computed once for several devices.
        """
        want = reference if reference is not None else self.reference(plan)
        for name in plan.outputs:
            if name not in outputs:
                raise AssertionError(f"{self.name}: output buffer {name!r} missing")
            ref = np.asarray(want[name])
            atol = self.atol
            if self.atol_rel and ref.size:
                atol += self.atol_rel * float(np.max(np.abs(ref.astype(np.float64))))
            assert_close(f"{self.name}.{name}", outputs[name], ref, self.rtol, atol)

    def unsupported_reason(self, device: Any) -> str | None:
        """Why this app cannot run on ``device`` (a pyopencl device), or ``None``."""
        exts = device.extensions.split()
        for ext in self.requires:
            if ext not in exts:
                return f"device lacks {ext}"
        return None
