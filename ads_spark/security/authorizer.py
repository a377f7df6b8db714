"""The ACL authorizer: Kafka's ACL model as pure data and one decision function.

Owns what an ACL is (``AclBinding``), a set of them (``Acls``, immutable so a broker can swap its
cache in one assignment and report its version), Kafka's filters for ``ads acls list|remove``
(``AclBindingFilter``) and ``authorize``, which answers one question -- may this principal from this
host do this operation on this resource -- with a ``Decision`` whose reason names the ACL that
decided. No I/O: storing ACLs in ZooKeeper and checking requests belong to the broker shell.

The rules are Kafka's (AclAuthorizer / StandardAuthorizer), in order:

1. a principal listed in ``super.users`` is allowed everything;
2. the ACLs *on the resource* are those of its type whose pattern matches its name (LITERAL equal
   name or the wildcard ``*``, PREFIXED a prefix of the name); when there are none at all (whoever
   they are for), the answer is ``allow.everyone.if.no.acl.found``;
3. a DENY for the principal (or ``User:*``), the host (or ``*``) and the operation (or ``All``)
   refuses -- DENY wins over any ALLOW, whatever the pattern types;
4. an ALLOW for the principal and host whose operation is the one asked, ``All``, or one that
   implies it (Read/Write/Delete/Alter imply Describe, AlterConfigs implies DescribeConfigs) allows;
   implications apply to ALLOW only, as in Kafka: a DENY Read does not deny Describe;
5. otherwise refused.

Two ADS choices beyond Kafka, both refusing what Kafka would accept but can never mean anything
useful: an operation a resource type does not have (ClusterAction on a Topic) and a PREFIXED pattern on
the Cluster or named ``*`` are refused when the ACL is made; ``User:*`` in ``super.users`` is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Iterator, Mapping

from ads_spark.errors import InvalidConfigError, InvalidRequestError
from ads_spark.protocol.names import TOPIC_NAME_RE, shown

CLUSTER_NAME = "kafka-cluster"  # Kafka's only name for the Cluster resource
WILDCARD = "*"
PRINCIPAL_TYPE = "User"
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal for an unauthenticated caller
PRINCIPAL_NAME_CHARS_MAX = 1024  # room for a certificate DN, not for a megabyte
HOST_CHARS_MAX = 255
GROUP_ID_CHARS_MAX = 255  # Kafka does not bound a group id; ADS does (protocol/group_schemas.GROUP_ID)
# Control characters and ";" (the super.users separator) cannot be in an ACL's principal name.
_BAD_PRINCIPAL_CHARS = re.compile(r"[\x00-\x1f\x7f;]")
_BAD_HOST_CHARS = re.compile(r"[\x00-\x20\x7f,;*]")
_BAD_GROUP_ACL_CHARS = re.compile("[/\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff]")


def _parse_enum(enum_cls, value: Any, field: str, error=InvalidRequestError):
    """An enum member from itself or its name in any case, with or without ``_`` (``IdempotentWrite``,
    ``IDEMPOTENT_WRITE``, ``idempotentwrite``); anything else names ``field`` and the choices."""
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        wanted = value.replace("_", "").replace("-", "").lower()
        for member in enum_cls:
            if member.value.lower() == wanted:
                return member
    choices = ", ".join(member.value for member in enum_cls)
    raise error(f"{field}: unknown {enum_cls.__name__} {shown(value)} (one of: {choices})")


class _ParsedEnum(Enum):
    """An enum read from a request or a CLI flag; a bad value's error names ``field``, by default the
    class name in snake case (``ResourceType`` -> ``resource_type``)."""

    @classmethod
    def parse(cls, value: Any, field: str | None = None):
        return _parse_enum(cls, value, field or re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower())


class ResourceType(_ParsedEnum):
    TOPIC = "Topic"
    CLUSTER = "Cluster"
    GROUP = "Group"  # a consumer group (issue #24): its id is the resource name


class PatternType(_ParsedEnum):
    LITERAL = "Literal"
    PREFIXED = "Prefixed"


class Operation(_ParsedEnum):
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"
    ALL = "All"


class Permission(_ParsedEnum):
    ALLOW = "Allow"
    DENY = "Deny"


# The operations an ALLOW ACL grants when asked for the key (besides the operation itself and All).
_ALLOW_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}

# Kafka's operations per resource type (AclCommand's table); All is valid on both.
VALID_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                                   Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS, Operation.ALL}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.ALTER, Operation.DESCRIBE,
                                     Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                                     Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALL}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.ALL}),
}


def granting_operations(operation: Operation) -> frozenset[Operation]:
    """The ACL operations an ALLOW must carry to grant ``operation``."""
    return frozenset({operation, Operation.ALL}) | _ALLOW_IMPLIED_BY.get(operation, frozenset())


def validate_principal(value: Any, field: str = "principal", error=InvalidRequestError) -> str:
    """``value`` if it is ``User:<name>`` (``User:*`` for everyone); otherwise ``error`` naming ``field``."""
    if not isinstance(value, str) or not value.startswith(PRINCIPAL_TYPE + ":"):
        raise error(f"{field}: a principal is 'User:<name>' (or 'User:*'), got {shown(value)}")
    name = value[len(PRINCIPAL_TYPE) + 1:]
    if not name or len(name) > PRINCIPAL_NAME_CHARS_MAX or _BAD_PRINCIPAL_CHARS.search(name):
        raise error(f"{field}: principal name must be 1-{PRINCIPAL_NAME_CHARS_MAX} characters without "
                    f"';' or control characters, got {shown(value)}")
    if WILDCARD in name and name != WILDCARD:
        raise error(f"{field}: '*' is only the whole name ('User:*' = everyone), got {shown(value)}")
    return value


def _validate_host(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > HOST_CHARS_MAX or (
            value != WILDCARD and _BAD_HOST_CHARS.search(value)):
        raise InvalidRequestError(f"host: '*' or one host address (1-{HOST_CHARS_MAX} characters, no "
                                  f"spaces, ',', ';' or '*'), got {shown(value)}")
    return value


def _validate_resource_name(resource_type: ResourceType, pattern_type: PatternType, name: Any) -> str:
    """The name if it can match something of ``resource_type`` under ``pattern_type``."""
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"resource_name: must be a non-empty string, got {shown(name)}")
    if resource_type is ResourceType.CLUSTER:
        if pattern_type is not PatternType.LITERAL or name != CLUSTER_NAME:
            raise InvalidRequestError(f"resource_name: the Cluster resource is LITERAL {CLUSTER_NAME!r}, got "
                                      f"{pattern_type.name} {shown(name)}")
        return name
    if name == WILDCARD:
        if pattern_type is PatternType.PREFIXED:
            raise InvalidRequestError("pattern_type: PREFIXED '*' is not a pattern; use LITERAL '*' for every topic")
        return name
    if resource_type is ResourceType.GROUP:
        # The name becomes a znode name (broker/zk/security_store.py): no '/' and nothing ZooKeeper refuses in
        # one. A group whose id has such characters is covered by a PREFIXED or '*' ACL.
        if len(name) > GROUP_ID_CHARS_MAX or _BAD_GROUP_ACL_CHARS.search(name):
            raise InvalidRequestError(f"resource_name: {shown(name)} cannot name groups in an ACL (1-"
                                      f"{GROUP_ID_CHARS_MAX} characters, no '/' or control characters)")
        return name
    if TOPIC_NAME_RE.match(name) is None or (pattern_type is PatternType.LITERAL and name in (".", "..")):
        raise InvalidRequestError(f"resource_name: {shown(name)} can match no topic name "
                                  f"(1-249 characters from [a-zA-Z0-9._-])")
    return name


@dataclass(frozen=True)
class Resource:
    """A concrete resource a request acts on (not a pattern)."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def cluster(cls) -> Resource:
        return cls(ResourceType.CLUSTER, CLUSTER_NAME)

    @classmethod
    def group(cls, group_id: str) -> Resource:
        return cls(ResourceType.GROUP, group_id)

    def __str__(self) -> str:
        return f"{self.type.value}:{self.name}"


@dataclass(frozen=True)
class RequestContext:
    """Who asks and from where: the authenticated principal (``ANONYMOUS`` if none) and its host. ``authorize``
    reads only these two attributes, so the broker passes its per-call ``CallContext`` as it is."""

    principal: str
    host: str


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern and an entry (principal, host, operation, permission).

    Accepts enum members or their names (any case); everything is checked here, so an ``AclBinding``
    that exists is valid. Bad input raises ``InvalidRequestError`` naming the field.
    """

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        resource_type = ResourceType.parse(self.resource_type)
        pattern_type = PatternType.parse(self.pattern_type)
        operation = Operation.parse(self.operation)
        if operation not in VALID_OPERATIONS[resource_type]:
            allowed = ", ".join(sorted(op.value for op in VALID_OPERATIONS[resource_type]))
            raise InvalidRequestError(f"operation: {operation.value} is not an operation on a "
                                      f"{resource_type.value} (one of: {allowed})")
        for field, value in (("resource_type", resource_type), ("pattern_type", pattern_type),
                             ("operation", operation), ("permission", Permission.parse(self.permission)),
                             ("resource_name", _validate_resource_name(resource_type, pattern_type,
                                                                       self.resource_name)),
                             ("principal", validate_principal(self.principal)),
                             ("host", _validate_host(self.host))):
            object.__setattr__(self, field, value)

    def matches_resource(self, resource: Resource) -> bool:
        """True when this ACL's pattern covers ``resource``."""
        if self.resource_type is not resource.type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return resource.name.startswith(self.resource_name)
        return self.resource_name == resource.name or self.resource_name == WILDCARD

    def sort_key(self) -> tuple:
        return (self.resource_type.value, self.resource_name, self.pattern_type.value, self.principal,
                self.host, self.operation.value, self.permission.value)

    def to_dict(self) -> dict[str, str]:
        """The JSON form stored and sent (``from_dict`` reads it back)."""
        return {"resource_type": self.resource_type.value, "resource_name": self.resource_name,
                "pattern_type": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.value, "permission": self.permission.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AclBinding:
        if not isinstance(data, Mapping):
            raise InvalidRequestError(f"acl: must be an object, got {shown(data)}")
        fields = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
                  "permission")
        missing = [field for field in fields if field not in data]
        extra = sorted(set(data) - set(fields))
        if missing or extra:
            raise InvalidRequestError(f"acl: missing fields {missing}, unknown fields {extra}")
        return cls(**{field: data[field] for field in fields})

    def __str__(self) -> str:
        return (f"{self.permission.name} {self.principal} {self.operation.value} from host {self.host} on "
                f"{self.resource_type.value}:{self.pattern_type.name}:{self.resource_name}")


class PatternFilter(Enum):
    """How a filter's resource name selects patterns (Kafka's PatternType filter values)."""

    ANY = "Any"  # any pattern type, the name exactly
    MATCH = "Match"  # every pattern that would apply to the named resource
    LITERAL = "Literal"
    PREFIXED = "Prefixed"

    @classmethod
    def parse(cls, value: Any, field: str = "pattern_type") -> PatternFilter:
        return _parse_enum(cls, value, field)


@dataclass(frozen=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: ``None`` in a field matches anything; set fields compare exactly,
    except ``pattern_filter`` MATCH, which selects the patterns that would cover ``resource_name``."""

    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_filter: PatternFilter = PatternFilter.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation | None = None
    permission: Permission | None = None

    def __post_init__(self) -> None:
        parsed = {"pattern_filter": PatternFilter.parse(self.pattern_filter, "pattern_type")}
        for field, parse in (("resource_type", ResourceType.parse), ("operation", Operation.parse),
                             ("permission", Permission.parse), ("principal", validate_principal)):
            value = getattr(self, field)
            parsed[field] = None if value is None else parse(value, field)
        for field in ("resource_name", "host"):
            value = getattr(self, field)
            if value is not None and not (isinstance(value, str) and value):
                raise InvalidRequestError(f"{field}: a filter value must be a non-empty string, got {shown(value)}")
        for field, value in parsed.items():
            object.__setattr__(self, field, value)

    @classmethod
    def exact(cls, binding: AclBinding) -> AclBindingFilter:
        """The filter that matches ``binding`` and nothing else."""
        return cls(binding.resource_type, binding.resource_name, PatternFilter(binding.pattern_type.value),
                   binding.principal, binding.host, binding.operation, binding.permission)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type is not None and self.resource_type is not acl.resource_type:
            return False
        same_type = self.pattern_filter.value == acl.pattern_type.value
        if self.pattern_filter in (PatternFilter.LITERAL, PatternFilter.PREFIXED) and not same_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_filter is not PatternFilter.MATCH:
            return self.resource_name == acl.resource_name
        return acl.matches_resource(Resource(acl.resource_type, self.resource_name))

    def matches(self, acl: AclBinding) -> bool:
        return (self._matches_pattern(acl)
                and (self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and (self.operation is None or self.operation is acl.operation)
                and (self.permission is None or self.permission is acl.permission))


class Acls:
    """An immutable set of ACLs, indexed by resource so a decision looks at a handful, not all."""

    __slots__ = ("_bindings", "_literal", "_prefixed")

    def __init__(self, bindings: Iterable[AclBinding] = ()):
        self._bindings = frozenset(bindings)
        for binding in self._bindings:
            if not isinstance(binding, AclBinding):
                raise InvalidRequestError(f"acls: not an AclBinding: {shown(binding)}")
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        for binding in sorted(self._bindings, key=AclBinding.sort_key):
            index = prefixed if binding.pattern_type is PatternType.PREFIXED else literal
            index.setdefault((binding.resource_type, binding.resource_name), []).append(binding)
        self._literal = {key: tuple(found) for key, found in literal.items()}
        self._prefixed = {key: tuple(found) for key, found in prefixed.items()}

    def add(self, *bindings: AclBinding) -> Acls:
        return Acls(self._bindings.union(bindings))

    def remove(self, acl_filter: AclBindingFilter) -> Acls:
        """The set without every ACL ``acl_filter`` matches (``matching`` says which those are)."""
        return Acls(binding for binding in self._bindings if not acl_filter.matches(binding))

    def matching(self, acl_filter: AclBindingFilter) -> tuple[AclBinding, ...]:
        return tuple(sorted((b for b in self._bindings if acl_filter.matches(b)), key=AclBinding.sort_key))

    def on_resource(self, resource: Resource) -> tuple[AclBinding, ...]:
        """Every ACL whose pattern covers ``resource``, whoever it is for (sorted within each kind)."""
        found = list(self._literal.get((resource.type, resource.name), ()))
        if resource.name != WILDCARD:
            found.extend(self._literal.get((resource.type, WILDCARD), ()))
        for end in range(1, len(resource.name) + 1):
            found.extend(self._prefixed.get((resource.type, resource.name[:end]), ()))
        return tuple(found)

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(sorted(self._bindings, key=AclBinding.sort_key))

    def __len__(self) -> int:
        return len(self._bindings)

    def __contains__(self, binding: object) -> bool:
        return binding in self._bindings

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Acls) and self._bindings == other._bindings

    def __hash__(self) -> int:
        return hash(self._bindings)

    def __repr__(self) -> str:
        return f"Acls({len(self._bindings)} bindings)"


@dataclass(frozen=True)
class Decision:
    """An authorization answer; ``reason`` names the ACL that decided, or why none did."""

    allowed: bool
    reason: str
    acl: AclBinding | None = None


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users`` (``User:a;User:b``, Kafka's separator since DNs hold commas) as principals."""
    if not isinstance(value, str):
        raise InvalidConfigError(f"super.users: must be a string, got {shown(value)}")
    principals = frozenset(part.strip() for part in value.split(";") if part.strip())
    for principal in principals:
        validate_principal(principal, "super.users", InvalidConfigError)
        if principal == WILDCARD_PRINCIPAL:
            raise InvalidConfigError("super.users: 'User:*' would make everyone a super user; list principals")
    return principals


def _entry_applies(acl: AclBinding, context: RequestContext) -> bool:
    return acl.principal in (context.principal, WILDCARD_PRINCIPAL) and acl.host in (context.host, WILDCARD)


def authorize(acls: Acls, request_context: RequestContext, operation: Operation, resource: Resource,
              super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False) -> Decision:
    """May ``request_context`` do ``operation`` on ``resource``? Kafka's order: super user, no ACL on the
    resource (``allow_if_no_acl``), DENY, ALLOW, refused."""
    operation = Operation.parse(operation)
    who = f"{request_context.principal} from host {request_context.host}"
    if request_context.principal in super_users:
        return Decision(True, f"{request_context.principal} is a super user")
    on_resource = acls.on_resource(resource)
    if not on_resource:
        verdict = "allowed" if allow_if_no_acl else "refused"
        return Decision(allow_if_no_acl, f"{operation.value} on {resource} {verdict} for {who}: no ACL on the "
                                         f"resource and allow.everyone.if.no.acl.found={str(allow_if_no_acl).lower()}")
    applying = [acl for acl in on_resource if _entry_applies(acl, request_context)]
    denied = (Operation.ALL, operation)
    for acl in applying:
        if acl.permission is Permission.DENY and acl.operation in denied:
            return Decision(False, f"{operation.value} on {resource} refused for {who} by ACL [{acl}]", acl)
    granting = granting_operations(operation)
    for acl in applying:
        if acl.permission is Permission.ALLOW and acl.operation in granting:
            return Decision(True, f"{operation.value} on {resource} allowed for {who} by ACL [{acl}]", acl)
    return Decision(False, f"{operation.value} on {resource} refused for {who}: no ALLOW ACL grants it "
                           f"({len(on_resource)} ACLs on the resource, none for this principal, host and operation)")
