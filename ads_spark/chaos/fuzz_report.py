"""The fuzzer's accounting: what each input got back, the scan for Python exception text, the report.

Kept apart from the run (``fuzz.py``) so that the judgement is plain functions over plain values,
unit-tested without a cluster (tests/unit/test_fuzz_report.py). An answer is one of:

* ``typed``: a Flight error whose ``extra_info`` is ``{"error_code": N, "message": ...}``, or an answer
  that carries a non-zero ``error_code`` in its body (a per-partition or per-chunk error: ``in_band``);
* ``untyped``: any other error the broker sent (a bare gRPC status, a Flight error without a code);
* ``success``: no error anywhere in the answer; every input is malformed, so this is a silent acceptance;
* ``hang``: the call's deadline passed;
* ``unreachable``: the broker process was dead when the call failed (its crash is reported separately);
* ``skipped``: not sent, because the broker was dead or had already hung on this category.

Every text a broker sent is scanned for Python exception names, tracebacks and errno text: a typed
UNKNOWN_SERVER_ERROR whose message is ``"TypeError: ..."`` is a validation that did not happen.
"""

from __future__ import annotations

import builtins
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ads_spark.errors import ErrorCode

OUTCOMES = ("typed", "untyped", "success", "hang", "unreachable", "skipped")
EXAMPLES_KEPT = 5  # per category and outcome
EXCEPTION_HITS_KEPT = 20  # per category
TEXT_KEPT_CHARS = 300

_BUILTIN_EXCEPTIONS = sorted(
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException) and not issubclass(value, Warning)
    and name not in ("BaseException", "Exception", "BaseExceptionGroup", "ExceptionGroup"))
_LIBRARY_EXCEPTIONS = (
    "JSONDecodeError", "ArrowException", "ArrowInvalid", "ArrowTypeError", "ArrowIndexError", "ArrowKeyError",
    "ArrowNotImplementedError", "ArrowMemoryError", "ArrowCapacityError", "ArrowSerializationError",
    "KazooException", "ZookeeperError", "NoNodeError", "NodeExistsError", "BadArgumentsError", "ConnectionLoss",
    "SessionExpiredError", "InvariantViolation")
EXCEPTION_NAMES = tuple(_BUILTIN_EXCEPTIONS) + _LIBRARY_EXCEPTIONS
_EXCEPTION_RE = re.compile(r"\b(?:" + "|".join(EXCEPTION_NAMES) + r")\b"
                           r"|Traceback \(most recent call last\)|File \"[^\"]*\", line \d+|\[Errno \d+\]")


def exception_names_in(text: str) -> list[str]:
    """The Python exception names, traceback lines and errno texts in ``text``, in order, each once."""
    return list(dict.fromkeys(match.group(0) for match in _EXCEPTION_RE.finditer(text)))


def code_name(code: Any) -> str:
    try:
        return ErrorCode(int(code)).name
    except (TypeError, ValueError):
        return f"code {code!r}"


@dataclass
class Answer:
    outcome: str
    code: str | None = None
    texts: tuple[str, ...] = ()
    in_band: bool = False
    detail: dict = field(default_factory=dict)


def typed_detail(extra_info: bytes | None) -> dict | None:
    """``extra_info`` as the ``{"error_code", "message"}`` of a typed error, or None."""
    if not extra_info:
        return None
    try:
        detail = json.loads(extra_info)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(detail, dict) and type(detail.get("error_code")) is int and isinstance(detail.get("message"), str):
        return detail
    return None


def _error_codes(value: Any) -> list[int]:
    """Every non-zero ``error_code`` in a decoded JSON answer, depth first (bounded by the answer's size)."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            code = item.get("error_code")
            if isinstance(code, int) and code:
                found.append(code)
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


def from_json_answers(texts: list[str], detail: dict | None = None) -> Answer:
    """A call that succeeded: ``typed`` (in band) if any answer carries an error code, else ``success``."""
    codes = []
    for text in texts:
        try:
            codes += _error_codes(json.loads(text))
        except ValueError:
            continue
    if codes:
        return Answer("typed", code_name(codes[0]), tuple(texts), in_band=True, detail=detail or {})
    return Answer("success", None, tuple(texts), detail=detail or {})


class CategoryStats:
    """Counts of one category: per input and broker, what came back."""

    def __init__(self, name: str):
        self.name = name
        self.inputs = 0  # distinct inputs; each goes to every broker
        self.sent = 0  # (input, broker) pairs actually sent
        self.outcomes: Counter = Counter()
        self.typed: Counter = Counter()
        self.in_band = 0
        self.kinds: Counter = Counter()
        self.examples: dict[str, list] = {}
        self.exception_hits: list[dict] = []
        self.exception_hit_count = 0
        self.extra: dict[str, Any] = {}  # category-specific findings (fetch sizes, thread counts, ...)

    def record(self, kind: str, label: str, broker_id: int, answer: Answer) -> None:
        self.outcomes[answer.outcome] += 1
        if answer.outcome != "skipped":
            self.sent += 1
        if answer.outcome == "typed":
            self.typed[answer.code] += 1
            self.in_band += answer.in_band
        self.kinds[f"{kind}: {answer.code if answer.outcome == 'typed' else answer.outcome}"] += 1
        shown = "; ".join(text[:TEXT_KEPT_CHARS] for text in answer.texts[:2])
        examples = self.examples.setdefault(answer.outcome, [])
        if answer.outcome not in ("typed", "skipped") and len(examples) < EXAMPLES_KEPT:
            examples.append({"broker": broker_id, "kind": kind, "input": label, "answer": shown})
        names = sorted({name for text in answer.texts for name in exception_names_in(text)})
        if names:
            self.exception_hit_count += 1
            if len(self.exception_hits) < EXCEPTION_HITS_KEPT:
                self.exception_hits.append({"broker": broker_id, "kind": kind, "input": label, "names": names,
                                            "answer": shown})

    def to_json(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "sent": self.sent, **{o: self.outcomes.get(o, 0) for o in OUTCOMES},
                "typed_by_code": dict(sorted(self.typed.items())), "in_band": self.in_band,
                "by_kind": dict(sorted(self.kinds.items())), "examples": self.examples,
                "exception_answers": self.exception_hit_count, "exception_examples": self.exception_hits,
                **self.extra}


def totals(categories: dict[str, dict]) -> dict[str, Any]:
    total: Counter = Counter()
    codes: Counter = Counter()
    for stats in categories.values():
        total.update({key: stats.get(key, 0) for key in ("inputs", "sent", *OUTCOMES, "exception_answers")})
        codes.update(stats.get("typed_by_code", {}))
    return {**dict(total), "typed_by_code": dict(sorted(codes.items()))}


def render_table(report: dict[str, Any]) -> str:
    """The per-category counts and the checks, as printed at the end of a run."""
    head = f"{'category':34} {'inputs':>6} {'sent':>6} {'typed':>6} {'untyp':>6} {'succ':>6} {'hang':>5} " \
           f"{'unrch':>5} {'skip':>5} {'exc':>5}  top codes"
    lines = [head, "-" * len(head)]
    rows = list(report.get("categories", {}).items()) + [("TOTAL", report.get("totals", {}))]
    for name, stats in rows:
        top = ", ".join(f"{code} {n}" for code, n in Counter(stats.get("typed_by_code", {})).most_common(3))
        lines.append(f"{name[:34]:34} {stats.get('inputs', 0):>6} {stats.get('sent', 0):>6} {stats.get('typed', 0):>6} "
                     f"{stats.get('untyped', 0):>6} {stats.get('success', 0):>6} {stats.get('hang', 0):>5} "
                     f"{stats.get('unreachable', 0):>5} {stats.get('skipped', 0):>5} "
                     f"{stats.get('exception_answers', 0):>5}  {top}")
    lines.append("")
    for name, check in report.get("checks", {}).items():
        lines.append(f"{'ok  ' if check['ok'] else 'FAIL'} {name}: {check['detail'][:200]}")
    return "\n".join(lines)


def failed_checks(report: dict[str, Any]) -> dict[str, str]:
    return {name: check["detail"] for name, check in report.get("checks", {}).items() if not check["ok"]}
