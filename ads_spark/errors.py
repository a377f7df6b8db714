"""Error codes and the exceptions clients raise for them.

One vocabulary for the whole system, named after Kafka's protocol errors so a
Kafka user needs no translation. Three kinds are kept apart:

* ``ErrorCode`` travels on the wire: a peer or request outcome, never a crash.
* ``AdsError`` and its subclasses are what a client raises for a code, with a
  message a person can act on and a ``retriable`` flag the client's retry loop
  reads.
* ``InvariantViolation`` is a bug in ADS itself; it is raised, never answered,
  and it is not an ``AdsError`` so that no retry loop swallows it.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Wire error codes; the numbers are Kafka's where Kafka has the error."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    RECORD_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    INCONSISTENT_TOPIC_ID = 103
    INELIGIBLE_REPLICA = 107
    STALE_CONTROLLER_EPOCH = 11
    TOPIC_AUTHORIZATION_FAILED = 29
    CLUSTER_AUTHORIZATION_FAILED = 31
    SECURITY_DISABLED = 54
    SASL_AUTHENTICATION_FAILED = 58
    # Consumer groups (Kafka's numbers).
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    GROUP_AUTHORIZATION_FAILED = 30
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    # Kafka has no wire code for a failed TLS handshake (the client raises SslAuthenticationException
    # before any request); ADS gives the client-side error a number outside Kafka's range.
    SSL_AUTHENTICATION_FAILED = -100


# Codes a client may retry after refreshing metadata or waiting; Kafka's list.
RETRIABLE_CODES = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
)


class InvariantViolation(Exception):
    """A replication or storage invariant is broken: a bug. Crash loudly."""


class AdsError(Exception):
    """Base of every error a client or the CLI reports for an error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False

    def __init__(self, message: str = "", code: ErrorCode | None = None):
        if code is not None:
            self.code = code
            self.retriable = code in RETRIABLE_CODES
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)
        self.message = message


def _class_name(code: ErrorCode) -> str:
    words = code.name.lower().split("_")
    name = "".join(w.capitalize() for w in words)
    if name.endswith("Exception"):
        name = name[: -len("Exception")]
    return name + "Error"


_ERROR_CLASSES: dict[ErrorCode, type[AdsError]] = {}
for _code in ErrorCode:
    if _code is ErrorCode.NONE:
        continue
    _cls = type(
        _class_name(_code),
        (AdsError,),
        {"code": _code, "retriable": _code in RETRIABLE_CODES, "__module__": __name__},
    )
    _ERROR_CLASSES[_code] = _cls
    globals()[_cls.__name__] = _cls

# Explicit names for linters and readers; they are the classes made above.
UnknownServerError = _ERROR_CLASSES[ErrorCode.UNKNOWN_SERVER_ERROR]
OffsetOutOfRangeError = _ERROR_CLASSES[ErrorCode.OFFSET_OUT_OF_RANGE]
CorruptMessageError = _ERROR_CLASSES[ErrorCode.CORRUPT_MESSAGE]
UnknownTopicOrPartitionError = _ERROR_CLASSES[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
LeaderNotAvailableError = _ERROR_CLASSES[ErrorCode.LEADER_NOT_AVAILABLE]
NotLeaderOrFollowerError = _ERROR_CLASSES[ErrorCode.NOT_LEADER_OR_FOLLOWER]
RequestTimedOutError = _ERROR_CLASSES[ErrorCode.REQUEST_TIMED_OUT]
BrokerNotAvailableError = _ERROR_CLASSES[ErrorCode.BROKER_NOT_AVAILABLE]
RecordTooLargeError = _ERROR_CLASSES[ErrorCode.RECORD_TOO_LARGE]
NetworkExceptionError = _ERROR_CLASSES[ErrorCode.NETWORK_EXCEPTION]
InvalidTopicError = _ERROR_CLASSES[ErrorCode.INVALID_TOPIC_EXCEPTION]
NotEnoughReplicasError = _ERROR_CLASSES[ErrorCode.NOT_ENOUGH_REPLICAS]
NotEnoughReplicasAfterAppendError = _ERROR_CLASSES[ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
InvalidRequiredAcksError = _ERROR_CLASSES[ErrorCode.INVALID_REQUIRED_ACKS]
TopicAlreadyExistsError = _ERROR_CLASSES[ErrorCode.TOPIC_ALREADY_EXISTS]
InvalidPartitionsError = _ERROR_CLASSES[ErrorCode.INVALID_PARTITIONS]
InvalidReplicationFactorError = _ERROR_CLASSES[ErrorCode.INVALID_REPLICATION_FACTOR]
InvalidReplicaAssignmentError = _ERROR_CLASSES[ErrorCode.INVALID_REPLICA_ASSIGNMENT]
InvalidConfigError = _ERROR_CLASSES[ErrorCode.INVALID_CONFIG]
PolicyViolationError = _ERROR_CLASSES[ErrorCode.POLICY_VIOLATION]  # an incompatible schema (schemas/)
NotControllerError = _ERROR_CLASSES[ErrorCode.NOT_CONTROLLER]
InvalidRequestError = _ERROR_CLASSES[ErrorCode.INVALID_REQUEST]
OutOfOrderSequenceNumberError = _ERROR_CLASSES[ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
DuplicateSequenceNumberError = _ERROR_CLASSES[ErrorCode.DUPLICATE_SEQUENCE_NUMBER]
InvalidProducerEpochError = _ERROR_CLASSES[ErrorCode.INVALID_PRODUCER_EPOCH]
KafkaStorageErrorError = _ERROR_CLASSES[ErrorCode.KAFKA_STORAGE_ERROR]
UnknownProducerIdError = _ERROR_CLASSES[ErrorCode.UNKNOWN_PRODUCER_ID]
FencedLeaderEpochError = _ERROR_CLASSES[ErrorCode.FENCED_LEADER_EPOCH]
UnknownLeaderEpochError = _ERROR_CLASSES[ErrorCode.UNKNOWN_LEADER_EPOCH]
UnsupportedCompressionTypeError = _ERROR_CLASSES[ErrorCode.UNSUPPORTED_COMPRESSION_TYPE]
StaleBrokerEpochError = _ERROR_CLASSES[ErrorCode.STALE_BROKER_EPOCH]
OffsetNotAvailableError = _ERROR_CLASSES[ErrorCode.OFFSET_NOT_AVAILABLE]
ElectionNotNeededError = _ERROR_CLASSES[ErrorCode.ELECTION_NOT_NEEDED]
EligibleLeadersNotAvailableError = _ERROR_CLASSES[ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE]
InconsistentTopicIdError = _ERROR_CLASSES[ErrorCode.INCONSISTENT_TOPIC_ID]
InvalidRecordError = _ERROR_CLASSES[ErrorCode.INVALID_RECORD]
StaleControllerEpochError = _ERROR_CLASSES[ErrorCode.STALE_CONTROLLER_EPOCH]
TopicAuthorizationFailedError = _ERROR_CLASSES[ErrorCode.TOPIC_AUTHORIZATION_FAILED]
ClusterAuthorizationFailedError = _ERROR_CLASSES[ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
SecurityDisabledError = _ERROR_CLASSES[ErrorCode.SECURITY_DISABLED]
SaslAuthenticationFailedError = _ERROR_CLASSES[ErrorCode.SASL_AUTHENTICATION_FAILED]
SslAuthenticationFailedError = _ERROR_CLASSES[ErrorCode.SSL_AUTHENTICATION_FAILED]
OffsetMetadataTooLargeError = _ERROR_CLASSES[ErrorCode.OFFSET_METADATA_TOO_LARGE]
CoordinatorLoadInProgressError = _ERROR_CLASSES[ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
CoordinatorNotAvailableError = _ERROR_CLASSES[ErrorCode.COORDINATOR_NOT_AVAILABLE]
NotCoordinatorError = _ERROR_CLASSES[ErrorCode.NOT_COORDINATOR]
IllegalGenerationError = _ERROR_CLASSES[ErrorCode.ILLEGAL_GENERATION]
InconsistentGroupProtocolError = _ERROR_CLASSES[ErrorCode.INCONSISTENT_GROUP_PROTOCOL]
InvalidGroupIdError = _ERROR_CLASSES[ErrorCode.INVALID_GROUP_ID]
UnknownMemberIdError = _ERROR_CLASSES[ErrorCode.UNKNOWN_MEMBER_ID]
InvalidSessionTimeoutError = _ERROR_CLASSES[ErrorCode.INVALID_SESSION_TIMEOUT]
RebalanceInProgressError = _ERROR_CLASSES[ErrorCode.REBALANCE_IN_PROGRESS]
InvalidCommitOffsetSizeError = _ERROR_CLASSES[ErrorCode.INVALID_COMMIT_OFFSET_SIZE]
GroupAuthorizationFailedError = _ERROR_CLASSES[ErrorCode.GROUP_AUTHORIZATION_FAILED]
NonEmptyGroupError = _ERROR_CLASSES[ErrorCode.NON_EMPTY_GROUP]
GroupIdNotFoundError = _ERROR_CLASSES[ErrorCode.GROUP_ID_NOT_FOUND]
MemberIdRequiredError = _ERROR_CLASSES[ErrorCode.MEMBER_ID_REQUIRED]
GroupMaxSizeReachedError = _ERROR_CLASSES[ErrorCode.GROUP_MAX_SIZE_REACHED]
FencedInstanceIdError = _ERROR_CLASSES[ErrorCode.FENCED_INSTANCE_ID]
GroupSubscribedToTopicError = _ERROR_CLASSES[ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC]
UnstableOffsetCommitError = _ERROR_CLASSES[ErrorCode.UNSTABLE_OFFSET_COMMIT]
# Kafka spells the storage error KafkaStorageException; keep a readable alias.
StorageError = KafkaStorageErrorError


class LogTruncationError(OffsetOutOfRangeError):
    """KIP-320: records a consumer already read were truncated away (an unclean election) and its
    ``auto.offset.reset`` is ``none``. Kafka's LogTruncationException. Names the partition, the
    offsets lost (``lost_from_offset`` .. ``lost_to_offset_exclusive`` - 1) and where the leader's log
    and the consumer's agree up to (``divergent_offset``: seek there to read what the log holds now)."""

    def __init__(self, topic: str, partition: int, lost_from_offset: int, lost_to_offset_exclusive: int):
        self.topic, self.partition = topic, partition
        self.lost_from_offset, self.lost_to_offset_exclusive = lost_from_offset, lost_to_offset_exclusive
        self.divergent_offset = lost_from_offset
        super().__init__(f"{topic}-{partition}: offsets {lost_from_offset}..{lost_to_offset_exclusive - 1} "
                         f"the consumer read were truncated from the log (unclean leader election); "
                         f"auto.offset.reset=none, so the position is left at {lost_to_offset_exclusive}: "
                         f"seek to {lost_from_offset} to read what the log holds there now")


def error_for(code: ErrorCode | int, message: str = "") -> AdsError:
    """The exception a client raises for ``code`` (any unknown number is a server error)."""
    try:
        code = ErrorCode(code)
    except ValueError:
        return UnknownServerError(f"unknown error code {code}: {message}")
    if code is ErrorCode.NONE:
        raise InvariantViolation("error_for(NONE): a success is not an error")
    return _ERROR_CLASSES[code](message)
