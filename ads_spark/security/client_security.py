"""Kafka's client security settings, parsed as data: the protocol and who a SASL client logs in as.

Owns ``security.protocol``, ``sasl.mechanism``, ``sasl.username``/``sasl.password`` and the
``sasl.jaas.config`` string Spark users copy from Kafka's documentation. The JAAS string is read by a
small tokenizer (quoted values with Java's escapes, a control flag, a closing ``;``) and only
``PlainLoginModule`` is accepted: nothing is imported or evaluated. Errors name the key and a position,
never a value, since any value may be (part of) a password; the password ends up in a ``Secret``.
TLS settings (``ssl.*``) are not parsed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ads_spark.errors import InvalidConfigError
from ads_spark.security.credentials import CredentialFormatError, Secret, validate_username


class SecurityConfigError(InvalidConfigError):
    """A client security setting is refused; ``key`` names it as the user wrote it (never its value)."""

    def __init__(self, key: str, problem: str):
        self.key = key
        super().__init__(f"invalid value for '{key}': {problem}")


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN",)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
# Kafka's JaasConfig accepts these control flags; with the single module a client config holds,
# all of them mean "log in with these options".
JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")
MAX_JAAS_CONFIG_CHARS = 8192
CLIENT_SECURITY_KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                        "sasl.jaas.config")
_JAVA_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_WORD = re.compile(r"[A-Za-z0-9_.$-]+")
_CLASS_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)*LoginModule")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """A client's security settings: the protocol and, for SASL, who it authenticates as.

    Pickling fails while ``password`` is set (a ``Secret``): Spark executors get a token, not this."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: Secret | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True, slots=True)
class JaasLogin:
    """One parsed ``sasl.jaas.config`` entry: the PLAIN login module's flag and credentials."""

    flag: str
    username: str
    password: Secret


def _jaas_tokens(text: str, key: str) -> list[tuple[str, str, int]]:
    """(kind, text, position) tokens: ``word``, ``quoted``, ``=`` and ``;``. Values never reach errors."""
    tokens, index = [], 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif char in "=;":
            tokens.append((char, char, index))
            index += 1
        elif char == '"':
            value, end = _jaas_quoted(text, index, key)
            tokens.append(("quoted", value, index))
            index = end
        elif (word := _WORD.match(text, index)) is not None:
            tokens.append(("word", word.group(), index))
            index = word.end()
        else:
            raise SecurityConfigError(key, f"unexpected character at position {index}")
    return tokens


def _jaas_quoted(text: str, start: int, key: str) -> tuple[str, int]:
    """The value of the quoted string opening at ``start`` (Java's escapes) and the index after it."""
    out, index = [], start + 1
    while index < len(text):
        char = text[index]
        if char == '"':
            return "".join(out), index + 1
        if char == "\\" and index + 1 < len(text):
            escaped = text[index + 1]
            octal = re.match(r"[0-3][0-7]{0,2}|[4-7][0-7]?", text[index + 1:index + 4])
            if octal:
                out.append(chr(int(octal.group(), 8)))
                index += 1 + len(octal.group())
                continue
            out.append(_JAVA_ESCAPES.get(escaped, escaped))
            index += 2
            continue
        out.append(char)
        index += 1
    raise SecurityConfigError(key, f"unterminated quoted value starting at position {start}")


def parse_jaas_config(text: Any, *, key: str = "sasl.jaas.config") -> JaasLogin:
    """Parse ``<PlainLoginModule> <flag> username="..." password="...";`` as data (nothing imported)."""
    if isinstance(text, Secret):  # a caller may already hold the whole string as a secret
        text = text.reveal()
    if not isinstance(text, str) or len(text) > MAX_JAAS_CONFIG_CHARS:
        raise SecurityConfigError(key, f"must be a string of at most {MAX_JAAS_CONFIG_CHARS} characters")
    tokens = _jaas_tokens(text, key)
    if not tokens:
        raise SecurityConfigError(key, "is empty: expected a login module, a flag and options")
    kind, module, _ = tokens[0]
    if kind != "word" or module != PLAIN_LOGIN_MODULE:
        shown = module if kind == "word" and _CLASS_NAME.fullmatch(module) else "the first word"
        raise SecurityConfigError(key, f"{shown} is not a supported login module (only {PLAIN_LOGIN_MODULE})")
    if len(tokens) < 2 or tokens[1][0] != "word" or tokens[1][1].lower() not in JAAS_FLAGS:
        raise SecurityConfigError(key, f"expected a control flag ({', '.join(JAAS_FLAGS)}) after the login module")
    options = _jaas_options(tokens[2:], key, len(text))
    for name in ("username", "password"):
        if name not in options:
            raise SecurityConfigError(key, f"missing option '{name}'")
    username = _client_username(options["username"], key)
    if not options["password"]:
        raise SecurityConfigError(key, "option 'password' is empty")
    return JaasLogin(tokens[1][1].lower(), username, Secret(options["password"]))


def _jaas_options(tokens: list[tuple[str, str, int]], key: str, end: int) -> dict[str, str]:
    """``name=value`` pairs up to the one closing ``;``; names are echoed in errors, values never."""
    options: dict[str, str] = {}
    index = 0
    while index < len(tokens) and tokens[index][0] != ";":
        window = tokens[index:index + 3]
        kinds = [kind for kind, _, _ in window]
        if len(kinds) < 3 or kinds[0] != "word" or kinds[1] != "=" or kinds[2] not in ("word", "quoted"):
            raise SecurityConfigError(key, f"expected name=value at position {tokens[index][2]}")
        name = window[0][1]
        if name not in ("username", "password"):
            raise SecurityConfigError(key, f"unknown option '{name}' (PlainLoginModule takes username, password)")
        if name in options:
            raise SecurityConfigError(key, f"option '{name}' given twice")
        options[name] = window[2][1]
        index += 3
    if index >= len(tokens):
        raise SecurityConfigError(key, f"missing ';' at the end (position {end})")
    if index + 1 < len(tokens):
        raise SecurityConfigError(key, "holds more than one login module; a client config takes exactly one")
    return options


def _client_username(value: Any, key: str) -> str:
    try:
        return validate_username(value)
    except CredentialFormatError as exc:
        raise SecurityConfigError(key, f"user name {exc.message.split(': ', 1)[1]}") from None


def _setting(config: Mapping[str, Any], prefix: str, name: str) -> Any:
    value = config.get(prefix + name)
    return value.strip() if isinstance(value, str) and name != "sasl.password" else value


def parse_client_security(config: Mapping[str, Any], *, prefix: str = "") -> ClientSecurity:
    """The security settings among ``config``'s keys (``prefix`` + Kafka's names, e.g. ``ads.`` in Spark).

    Keys other than ``CLIENT_SECURITY_KEYS`` are left to their owners. Credentials come from either
    ``sasl.jaas.config`` or ``sasl.username``/``sasl.password``, never both; SASL settings with a
    non-SASL protocol are refused rather than ignored, as every key must do something."""
    protocol_key = prefix + "security.protocol"
    protocol = _setting(config, prefix, "security.protocol") or "PLAINTEXT"
    if not isinstance(protocol, str) or protocol.upper() not in SECURITY_PROTOCOLS:
        raise SecurityConfigError(protocol_key, f"must be one of {', '.join(SECURITY_PROTOCOLS)}")
    protocol = protocol.upper()
    given = [name for name in CLIENT_SECURITY_KEYS[1:] if _setting(config, prefix, name) not in (None, "")]
    if not protocol.startswith("SASL_"):
        if given:
            raise SecurityConfigError(prefix + given[0], f"needs {protocol_key} SASL_PLAINTEXT or SASL_SSL "
                                                         f"(it is {protocol})")
        return ClientSecurity(protocol)
    mechanism = _setting(config, prefix, "sasl.mechanism") or "PLAIN"
    if not isinstance(mechanism, str) or mechanism.upper() not in SASL_MECHANISMS:
        raise SecurityConfigError(prefix + "sasl.mechanism", f"must be one of {', '.join(SASL_MECHANISMS)}")
    username, password = _sasl_credentials(config, prefix, given)
    return ClientSecurity(protocol, mechanism.upper(), username, password)


def _sasl_credentials(config: Mapping[str, Any], prefix: str, given: list[str]) -> tuple[str, Secret]:
    """(username, password) from exactly one of the two ways a client may give them."""
    jaas_key = prefix + "sasl.jaas.config"
    if "sasl.jaas.config" in given:
        for name in ("sasl.username", "sasl.password"):
            if name in given:
                raise SecurityConfigError(prefix + name, f"set either {jaas_key} or "
                                                         f"{prefix}sasl.username/{prefix}sasl.password, not both")
        login = parse_jaas_config(_setting(config, prefix, "sasl.jaas.config"), key=jaas_key)
        return login.username, login.password
    for name in ("sasl.username", "sasl.password"):
        if name not in given:
            raise SecurityConfigError(prefix + name, f"missing: SASL needs {prefix}sasl.username and "
                                                     f"{prefix}sasl.password, or {jaas_key}")
    username = _client_username(_setting(config, prefix, "sasl.username"), prefix + "sasl.username")
    password = _setting(config, prefix, "sasl.password")
    if isinstance(password, Secret):
        return username, password
    if not isinstance(password, str):
        raise SecurityConfigError(prefix + "sasl.password", "must be a string")
    return username, Secret(password)
