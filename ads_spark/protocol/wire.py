"""The wire codec shared by broker and client: Flight calls, JSON bodies, errors.

docs/DESIGN.md ("Wire protocol") is the specification. Everything that crosses
a socket is built and parsed here, so the broker and the client cannot drift
apart, and so that a malformed request is rejected in one place with
INVALID_REQUEST before any state is touched.

Errors of a whole call travel as a FlightServerError whose ``extra_info`` is
``{"error_code": N, "message": "..."}``; ``to_ads_error`` turns any Flight
exception back into the typed ``AdsError``.
"""

from __future__ import annotations

import json
import re
from collections import abc
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.errors import (
    AdsError,
    ErrorCode,
    InvalidRequestError,
    NetworkExceptionError,
    RequestTimedOutError,
    error_for,
)
from ads_spark.protocol.records import ALL_ROWS, NO_DELETE_HORIZON, NO_SCHEMA_ID, NO_STATS, BatchHeader

# Upper bound on any JSON request body; a larger one is malformed, not a DoS vector.
JSON_BODY_BYTES_MAX = 16 << 20

ACTION_METADATA = "metadata"
ACTION_LIST_OFFSETS = "list_offsets"
ACTION_CREATE_TOPICS = "create_topics"
ACTION_DELETE_TOPICS = "delete_topics"
ACTION_DESCRIBE_CONFIGS = "describe_configs"
ACTION_ALTER_CONFIGS = "alter_configs"
ACTION_ELECT_LEADERS = "elect_leaders"
ACTION_REASSIGN = "alter_partition_reassignments"
ACTION_CREATE_PARTITIONS = "create_partitions"  # grow a topic (Kafka's CreatePartitions)
ACTION_DELETE_RECORDS = "delete_records"  # move a led partition's log start forward (Kafka's DeleteRecords)
ACTION_REGISTER_SCHEMA = "register_schema"  # a typed topic's new schema version (issue #26)
ACTION_DESCRIBE_SCHEMA = "describe_schema"  # a typed topic's schema versions
ACTION_LEADER_AND_ISR = "leader_and_isr"
ACTION_UPDATE_METADATA = "update_metadata"
ACTION_STOP_REPLICA = "stop_replica"
ACTION_CONTROLLED_SHUTDOWN = "controlled_shutdown"
ACTION_REPLICA_STATUS = "replica_status"
ACTION_REPLICA_LOG_ENDS = "replica_log_ends"  # controller -> broker, before an unclean election
ACTION_INIT_PRODUCER_ID = "init_producer_id"
ACTION_LOCATE = "locate"  # where a fetch's batches are in the segment files (ads_spark/local_reads.py)
ACTION_OFFSET_FOR_LEADER_EPOCH = "offset_for_leader_epoch"  # a consumer's KIP-320 check of its position
# Security (issue #23; broker/rpc/security_handlers.py)
ACTION_AUTHENTICATE = "authenticate"  # Basic credentials -> a token (SASL_* listeners only)
ACTION_CREATE_ACLS = "create_acls"
ACTION_DELETE_ACLS = "delete_acls"
ACTION_DESCRIBE_ACLS = "describe_acls"
ACTION_ALTER_USER_CREDENTIALS = "alter_user_credentials"
ACTION_DESCRIBE_USERS = "describe_users"
# Consumer groups (issue #24; broker/rpc/group_handlers.py serves them, the group consumer and admin call them)
ACTION_FIND_COORDINATOR = "find_coordinator"
ACTION_JOIN_GROUP = "join_group"
ACTION_SYNC_GROUP = "sync_group"
ACTION_HEARTBEAT = "heartbeat"
ACTION_LEAVE_GROUP = "leave_group"
ACTION_OFFSET_COMMIT = "offset_commit"
ACTION_OFFSET_FETCH = "offset_fetch"
ACTION_LIST_GROUPS = "list_groups"
ACTION_DESCRIBE_GROUPS = "describe_groups"
ACTION_DELETE_GROUPS = "delete_groups"
ACTION_OFFSET_DELETE = "offset_delete"

FETCH = "fetch"
FETCH_SESSION = "fetch_session"  # a DoExchange stream of fetches (broker/rpc/server.py)
PRODUCE = "produce"

ACKS_VALUES = {"0": 0, "1": 1, "all": -1, "-1": -1}


# One encoder for every message: ``json.dumps`` with options builds a new encoder per call, and with
# sorted keys that was ~40% of encoding a fetch answer's metadata (8.7 -> 5.3 us); JSON readers do not
# care about key order, and everything encoded here is built by this code (no cycles to check for).
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def loads(raw: bytes | pa.Buffer | None, what: str) -> Any:
    """Parse a JSON body, raising INVALID_REQUEST (naming ``what``) on anything malformed."""
    if raw is None:
        raise InvalidRequestError(f"{what}: missing body")
    if isinstance(raw, pa.Buffer):
        raw = raw.to_pybytes()
    if len(raw) > JSON_BODY_BYTES_MAX:
        raise InvalidRequestError(f"{what}: body of {len(raw)} bytes exceeds {JSON_BODY_BYTES_MAX}")
    if nesting_depth_exceeds(raw, JSON_DEPTH_MAX):
        raise InvalidRequestError(f"{what}: body nests lists and objects deeper than {JSON_DEPTH_MAX} levels")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"{what}: body is not valid JSON ({_first_line(exc)[:200]})") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4,300 digits; nesting (checked above)
        raise InvalidRequestError(f"{what}: body is not acceptable JSON ({_first_line(exc)[:200]})") from None


# No request of ADS nests deeper than 5 levels; the schemas (protocol/request_schemas.py) bound it anyway, this
# bounds the parser: json.loads recurses once per level, and 100,000 levels raised RecursionError in every handler.
JSON_DEPTH_MAX = 32
_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def nesting_depth_exceeds(raw: bytes, depth_max: int) -> bool:
    """Whether JSON text ``raw`` opens more than ``depth_max`` lists/objects inside each other.

    Cheap for what requests are: a body with at most ``depth_max`` opening brackets cannot nest deeper (two
    C-speed counts). Otherwise the running depth of every bracket is summed in numpy, strings included; only
    when that exceeds the bound are strings blanked (a bracket inside one does not nest) and the sum taken
    again, so a fetch of many partitions costs ~10 us, not a regex pass. Strings crafted with unbalanced
    closing brackets can hide depth from the first sum; ``json.loads`` itself stops at the interpreter's
    recursion limit (RecursionError, answered as INVALID_REQUEST), and the schemas bound what a handler sees."""
    if raw.count(b"[") + raw.count(b"{") <= depth_max:
        return False
    if _max_depth(raw.translate(None, _NOT_BRACKETS)) <= depth_max:
        return False
    return _max_depth(_STRING_RE.sub(b'""', raw).translate(None, _NOT_BRACKETS)) > depth_max


def _max_depth(brackets: bytes) -> int:
    steps = np.frombuffer(brackets, dtype=np.uint8)
    if not steps.size:
        return 0
    return int(np.cumsum(np.where((steps == 91) | (steps == 123), 1, -1), dtype=np.int64).max())  # '[' '{'



def require(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    """A required field of a request body, type-checked (bool is not accepted as int)."""
    # typing.Mapping's isinstance costs ~1.2 us (about 20 per request); JSON objects are dicts.
    if type(body) is not dict and not isinstance(body, abc.Mapping):
        raise InvalidRequestError(f"{what}: expected a JSON object")
    if key not in body:
        raise InvalidRequestError(f"{what}: missing field '{key}'")
    value = body[key]
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise InvalidRequestError(f"{what}: field '{key}' must be {kind}, got a boolean")
    if not isinstance(value, kind):
        raise InvalidRequestError(f"{what}: field '{key}' has the wrong type ({type(value).__name__})")
    return value


def optional(body: Mapping[str, Any], key: str, kind, default, what: str) -> Any:
    if key not in body or body[key] is None:
        return default
    return require(body, key, kind, what)


def parse_acks(value: Any) -> int:
    """'all'/-1/'1'/1/'0'/0 -> -1, 1 or 0."""
    normalized = str(value).strip().lower()
    if normalized not in ACKS_VALUES:
        raise error_for(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or all, got {value!r}")
    return ACKS_VALUES[normalized]


# ---- errors across the wire -------------------------------------------------


# A Flight error travels in gRPC headers (its text) and trailers (extra_info), which clients refuse past 16 KiB
# (RESOURCE_EXHAUSTED, no code left to read): a message naming thousands of columns is cut to fit, saying so.
ERROR_MESSAGE_CHARS_MAX = 2000
ERROR_DETAIL_BYTES_MAX = 6000  # JSON escapes non-ASCII text up to 6 bytes a character: cut again past this


def _bounded(message: str, chars: int) -> str:
    return message if len(message) <= chars else f"{message[:chars]}... (cut: {len(message)} characters in all)"


def flight_error(error: AdsError) -> flight.FlightServerError:
    """The exception a Flight handler raises for ``error``, its message bounded to fit gRPC's metadata."""
    message = _bounded(error.message or str(error), ERROR_MESSAGE_CHARS_MAX)
    detail = dumps({"error_code": int(error.code), "message": message})
    if len(detail) > ERROR_DETAIL_BYTES_MAX:
        message = _bounded(message, ERROR_MESSAGE_CHARS_MAX // 8)
        detail = dumps({"error_code": int(error.code), "message": message})
    return flight.FlightServerError(f"{error.code.name}: {message}" if error.message else str(error),
                                    extra_info=detail)


# What pyarrow raises (ArrowInvalid, no subtype) for a call on a FlightClient already closed.
CLOSED_CLIENT_MESSAGE = "FlightClient is closed"


def to_ads_error(exc: Exception) -> AdsError:
    """A Flight (or socket) exception as the typed AdsError the caller should see."""
    if isinstance(exc, AdsError):
        return exc
    extra = getattr(exc, "extra_info", None)
    if extra:
        try:
            detail = json.loads(extra)
            return error_for(int(detail["error_code"]), str(detail.get("message", "")))
        except (ValueError, KeyError, TypeError):
            pass
    if isinstance(exc, flight.FlightTimedOutError):
        return RequestTimedOutError(f"request timed out: {exc}")
    if isinstance(exc, flight.FlightUnavailableError) and (reason := _tls_failure(str(exc))):
        # An untrusted or misnamed certificate, TLS against a plaintext listener: retrying cannot help, and
        # a retriable error would have the client retry until its timeout (Kafka: SslAuthenticationException).
        return error_for(ErrorCode.SSL_AUTHENTICATION_FAILED, reason)
    if isinstance(exc, flight.FlightUnauthenticatedError):  # a broker's fixed refusal without an error code
        return error_for(ErrorCode.SASL_AUTHENTICATION_FAILED, _first_line(exc))
    if isinstance(exc, (flight.FlightUnavailableError, flight.FlightCancelledError, ConnectionError, OSError)):
        return NetworkExceptionError(f"broker unreachable: {_first_line(exc)}")
    if isinstance(exc, pa.ArrowInvalid) and str(exc).startswith(CLOSED_CLIENT_MESSAGE):
        # Another thread dropped the shared connection (it saw the broker fail, or the broker closed it as
        # idle) while this call was starting on it: retriable like the failure that made it drop.
        return NetworkExceptionError(f"connection closed while in use: {_first_line(exc)}")
    if isinstance(exc, flight.FlightError):
        return error_for(ErrorCode.UNKNOWN_SERVER_ERROR, _first_line(exc))
    return error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


def _tls_failure(message: str) -> str | None:
    """security/tls.classify_tls_failure, imported on a failure only: it loads ``cryptography``."""
    if "certificate" not in message and "Ssl" not in message and "wrong version" not in message:
        return None
    from ads_spark.security.tls import classify_tls_failure

    return classify_tls_failure(message)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def consumer_fetch_request(partitions, *, max_wait_ms: int, max_bytes: int, partition_max_bytes: int,
                           client_rack: str | None) -> dict[str, Any]:
    """A consumer's fetch of ``partitions``: (topic, partition, fetch_offset, current_leader_epoch) tuples."""
    return {"type": FETCH, "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
            "client_rack": client_rack,
            "partitions": [{"topic": topic, "partition": partition, "fetch_offset": offset,
                            "current_leader_epoch": epoch, "partition_max_bytes": partition_max_bytes}
                           for topic, partition, offset, epoch in partitions]}


# ---- fetch response metadata ------------------------------------------------


def split_fetch_answer(chunks) -> tuple[dict[tuple[str, int], dict], dict[tuple[str, int], list]]:
    """A fetch answer's (metadata, batch) chunks by partition: (partition metadata, [(batch, chunk metadata)]).

    Every answer shape (DoGet, fetch session, replica session) is grouped here once: the first chunk of a
    partition with batches carries its metadata (error code, HW, ...), every chunk with rows one stored
    batch; the partitions without batches come together in one chunk's ``"partitions"`` list.
    """
    infos: dict[tuple[str, int], dict] = {}
    batches: dict[tuple[str, int], list] = {}
    for meta, data in chunks:
        if "partitions" in meta:
            for info in meta["partitions"]:
                infos[(info["topic"], info["partition"])] = info
            continue
        key = (meta["topic"], meta["partition"])
        if "error_code" in meta:
            infos[key] = meta
        if data is not None and data.num_rows:
            batches.setdefault(key, []).append((data, meta))
    return infos, batches


def header_to_json(header: BatchHeader) -> dict[str, Any]:
    value = {
        "base_offset": header.base_offset,
        "record_count": header.record_count,
        "leader_epoch": header.leader_epoch,
        "max_timestamp_ms": header.max_timestamp_ms,
        "timestamp_type": header.timestamp_type,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
        "crc": header.crc,
    }
    if header.cleaned:  # only a cleaned batch says how many rows it holds (records.BatchHeader)
        value["row_count"] = header.row_count
    if header.delete_horizon_ms != NO_DELETE_HORIZON:
        value["delete_horizon_ms"] = header.delete_horizon_ms
    if header.schema_id != NO_SCHEMA_ID:
        value["schema_id"] = header.schema_id
    if header.stats != NO_STATS:
        value["stats"] = header.stats
    return value


def header_from_json(value: Mapping[str, Any]) -> BatchHeader:
    try:
        fields = {k: int(value[k]) for k in header_to_json(BatchHeader(0, 1, 0, 0))}
        return BatchHeader(**fields, row_count=int(value.get("row_count", ALL_ROWS)),
                           delete_horizon_ms=int(value.get("delete_horizon_ms", NO_DELETE_HORIZON)),
                           schema_id=int(value.get("schema_id", NO_SCHEMA_ID)),
                           stats=_stats_text(value.get("stats", NO_STATS)))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidRequestError(f"malformed batch header in fetch response: {exc}") from exc


def _stats_text(value: Any) -> str:
    """A header's statistics as sent: JSON text (a str), else the answer is malformed."""
    if not isinstance(value, str):
        raise TypeError(f"stats must be a string, got {type(value).__name__}")
    return value


def address_of(host: str, port: int) -> str:
    return f"grpc+tcp://{host}:{port}"


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2' -> [(h1, p1), (h2, p2)] with a clear error for anything else."""
    result = []
    for item in str(servers or "").split(","):
        item = item.strip()
        if not item:
            continue
        item = item.rpartition("://")[2]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise InvalidRequestError(f"bad bootstrap server {item!r}: expected host:port")
        result.append((host, int(port)))
    if not result:
        raise InvalidRequestError("no bootstrap servers given (bootstrap.servers is empty)")
    return result
