"""The one place that says what a verdict means.

Every consumer (reports, baselines, the pool, the PR body, the dashboard, support tracking)
asks the `Verdict` instead of keeping its own table of verdict strings. Adding a verdict is
one member here plus its row in `_TRAITS`; nothing else re-derives it.

The vocabulary is PyTorch's model-corpus one (`full_graph`, `graph_break`, `compile_error`,
`eager_error`, `create_error`, `timeout`) plus:
  crash               the child process died (segfault, abort, OOM kill)
  missing_dependency  an optional package that cannot be installed here (not counted)
  memory_limit        the model would exceed the parameter/memory budget (refused before building)
  skipped             the scenario does not apply to this model (e.g. `decode` without a cache)
  eager_ok            the build pass: built and ran eagerly (no compile verdict asked for)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class _Traits:
    ok: bool  # the model ran through every stage its pass asked for
    rank: int  # higher is better; a lower rank than the baseline's is a regression
    accuracy: str  # PyTorch benchmark CSV `accuracy` column when numerics did not decide it
    style: str  # rich style for terminals
    counted: bool  # counted in coverage (missing optional packages and skips are not)
    builder_failure: bool  # the harness could not build or run the model eagerly
    touches_device: bool  # the failure can happen after device work (a CUDA worker must retire)
    symbol: str  # a text mark beside the word (colour is never the only signal)


class Verdict(str, Enum):
    FULL_GRAPH = "full_graph"
    GRAPH_BREAK = "graph_break"
    COMPILE_ERROR = "compile_error"
    EAGER_ERROR = "eager_error"
    CREATE_ERROR = "create_error"
    TIMEOUT = "timeout"
    CRASH = "crash"
    MISSING_DEPENDENCY = "missing_dependency"
    MEMORY_LIMIT = "memory_limit"
    SKIPPED = "skipped"
    EAGER_OK = "eager_ok"

    def __str__(self) -> str:  # f-strings and reports print the plain word
        return self.value

    @classmethod
    def of(cls, value: "str | Verdict") -> "Verdict":
        """Parse a stored verdict; an unknown word (a newer bot's) reads as a crash, never ok."""
        try:
            return cls(value)
        except ValueError:
            return cls.CRASH

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: object, _handler: object) -> object:
        """Validation of a loaded result (enablebot/validate.py): a word goes through `of`, so the
        unknown-word rule holds there too; anything but a string is refused."""
        from pydantic_core import core_schema

        def parse(value: object) -> "Verdict":
            if not isinstance(value, str):
                raise ValueError("a verdict word (" + ", ".join(v.value for v in cls) + ")")
            return cls.of(value)

        return core_schema.no_info_plain_validator_function(parse)

    @property
    def traits(self) -> _Traits:
        return _TRAITS[self]

    @property
    def ok(self) -> bool:
        return self.traits.ok

    @property
    def rank(self) -> int:
        return self.traits.rank

    @property
    def style(self) -> str:
        return self.traits.style

    @property
    def symbol(self) -> str:
        return self.traits.symbol

    @property
    def counted(self) -> bool:
        return self.traits.counted

    @property
    def builder_failure(self) -> bool:
        return self.traits.builder_failure

    @property
    def failed(self) -> bool:
        """A failure worth listing with its reason (not ok, and not an accepted absence)."""
        return not self.ok and self.counted

    def poisons_worker(self, device: str) -> bool:
        """Whether a worker process must not run another model after this verdict: after a
        crash or timeout always, and on CUDA after any failure that may have touched the device
        (a device-side assert poisons the context for every later model in that process)."""
        if self in (Verdict.CRASH, Verdict.TIMEOUT):
            return True
        return device.startswith("cuda") and not self.ok and self.traits.touches_device

    def accuracy(self, numerics_status: str | None) -> str:
        """The benchmark CSV accuracy column: the verdict's word for failures, else the numerics
        status (`pass`, `fail_accuracy`, `eager_two_runs_differ`), else empty."""
        if not self.ok:
            return self.traits.accuracy
        return numerics_status or ""


_TRAITS = {
    Verdict.FULL_GRAPH: _Traits(True, 2, "", "bold green", True, False, True, "✓"),
    Verdict.GRAPH_BREAK: _Traits(True, 1, "", "bold yellow", True, False, True, "◐"),
    Verdict.COMPILE_ERROR: _Traits(False, 0, "fail_to_run", "bold red", True, False, True, "✗"),
    Verdict.EAGER_ERROR: _Traits(False, 0, "eager_fail_to_run", "red", True, True, True, "✗"),
    Verdict.CREATE_ERROR: _Traits(False, 0, "model_fail_to_load", "red", True, True, False, "✗"),
    Verdict.TIMEOUT: _Traits(False, 0, "timeout", "bold red", True, False, True, "✗"),
    Verdict.CRASH: _Traits(False, 0, "fail_to_run", "bold red", True, False, True, "✗"),
    Verdict.MISSING_DEPENDENCY: _Traits(False, 0, "model_fail_to_load", "magenta", False, False, False, "–"),
    Verdict.MEMORY_LIMIT: _Traits(False, 0, "OOM", "magenta", True, True, False, "✗"),
    Verdict.SKIPPED: _Traits(False, 0, "", "dim", False, False, False, "–"),
    Verdict.EAGER_OK: _Traits(True, 2, "", "green", True, False, True, "✓"),
}
assert set(_TRAITS) == set(Verdict), "every Verdict needs its traits"

VERDICTS = tuple(v.value for v in Verdict)
OK_VERDICTS = tuple(v.value for v in Verdict if v.ok)
