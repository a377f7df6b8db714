"""Who is calling, from where, through which listener: the per-call facts a handler may read.

``server.py`` builds one ``CallContext`` per Flight call (the principal from a verified token, a
mapped client certificate or ``User:ANONYMOUS``; the peer's IP; the listener the call came in on)
and sets it for the handler's duration with ``using``. Handlers read ``current()``: metadata
answers the endpoints of the caller's listener, authorization needs the principal and host.

A thread-local, not an argument: the handlers' signatures (``handler(body)``) are shared with
in-process callers and the simulation, which know nothing of calls. Code running outside a Flight
call (the controller calling its own broker, tests) sees ``DEFAULT``: ANONYMOUS on the inter-broker
listener (``INTER_BROKER_LISTENER``, the empty name: whichever listener the broker's
``inter.broker.listener.name`` says). The context never holds anything a log line could leak
except through ``basic_credentials``, whose password is a ``Secret``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from ads_spark.security.authorizer import ANONYMOUS
from ads_spark.security.credentials import Secret

# The listener of a context made outside any Flight call: read it as "the inter-broker listener".
INTER_BROKER_LISTENER = ""
PLAINTEXT = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class CallContext:
    """``principal``: ``User:<name>``. ``host``: the peer's IP ("" outside a call). ``basic_credentials``:
    the (username, password) of a ``Basic`` header, which only the ``authenticate`` action reads."""

    principal: str
    host: str
    listener_name: str
    security_protocol: str
    basic_credentials: tuple[str, Secret] | None = None

    def __repr__(self) -> str:  # never the password, even hidden: only whether one came
        basic = ", basic_credentials=<given>" if self.basic_credentials is not None else ""
        return (f"CallContext(principal={self.principal!r}, host={self.host!r}, listener_name="
                f"{self.listener_name!r}, security_protocol={self.security_protocol!r}{basic})")


DEFAULT = CallContext(ANONYMOUS, "", INTER_BROKER_LISTENER, PLAINTEXT)

_local = threading.local()


def current() -> CallContext:
    """The context of the Flight call this thread serves, else ``DEFAULT``."""
    return getattr(_local, "context", DEFAULT)


class using:
    """``with using(context):`` makes ``context`` this thread's for the block; the previous one comes back
    on any exit. A class, not a generator context manager: it runs on every call and costs half as much."""

    __slots__ = ("_context", "_previous")

    def __init__(self, context: CallContext):
        self._context = context
        self._previous: CallContext | None = None

    def __enter__(self) -> CallContext:
        self._previous = getattr(_local, "context", None)
        _local.context = self._context
        return self._context

    def __exit__(self, *exc_info) -> None:
        if self._previous is None:
            del _local.context
        else:
            _local.context = self._previous
