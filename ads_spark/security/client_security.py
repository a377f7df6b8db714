"""Kafka's client security settings, parsed as data: the protocol and who a SASL client logs in as.

Owns ``security.protocol``, ``sasl.mechanism``, ``sasl.username``/``sasl.password`` and the
``sasl.jaas.config`` string Spark users copy from Kafka's documentation. The JAAS string is read by a
small tokenizer (quoted values with Java's escapes, a control flag, a closing ``;``) and only
``PlainLoginModule`` is accepted: nothing is imported or evaluated. Errors name the key and a position,
never a value, since any value may be (part of) a password; the password ends up in a ``Secret``.
The client's TLS settings (``ssl.truststore.location``, ``ssl.keystore.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``) and ADS's ``sasl.token`` (a token from the broker's
``authenticate`` action, what Spark executors get instead of a password) are parsed here as well; the
files are read by ``protocol/transport.py`` (this module does no I/O).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ads_spark.errors import InvalidConfigError
from ads_spark.security.credentials import MAX_TOKEN_CHARS, CredentialFormatError, Secret, validate_username


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
SASL_KEYS = ("sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config", "sasl.token")
SSL_KEYS = ("ssl.truststore.location", "ssl.keystore.location", "ssl.key.password",
            "ssl.endpoint.identification.algorithm")
CLIENT_SECURITY_KEYS = ("security.protocol", *SASL_KEYS, *SSL_KEYS)
# Kafka's values: "https" checks the broker certificate's names against the host dialled, "" does not.
ENDPOINT_IDENTIFICATION_ALGORITHMS = ("https", "")

_JAVA_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_WORD = re.compile(r"[A-Za-z0-9_.$-]+")
_CLASS_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)*LoginModule")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """A client's security settings: the protocol and, for SASL, who it authenticates as.

    Pickling fails while ``password`` or ``key_password`` is set (a ``Secret``): Spark executors get a
    token, not this. ``token`` is a bearer token given directly (``sasl.token``); it never shows in a repr.
    The ``*_location`` fields are file paths, read by ``protocol/transport.py``."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: Secret | None = None
    token: str | None = field(default=None, repr=False)
    truststore_location: str | None = None
    keystore_location: str | None = None
    key_password: Secret | None = None
    check_hostname: bool = True

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


_UNSTRIPPED = ("sasl.password", "ssl.key.password")  # a password may begin or end with a blank


def _setting(config: Mapping[str, Any], prefix: str, name: str) -> Any:
    value = config.get(prefix + name)
    return value.strip() if isinstance(value, str) and name not in _UNSTRIPPED else value


def parse_client_security(config: Mapping[str, Any], *, prefix: str = "") -> ClientSecurity:
    """The security settings among ``config``'s keys (``prefix`` + Kafka's names, e.g. ``ads.`` in Spark).

    Keys other than ``CLIENT_SECURITY_KEYS`` are left to their owners. Credentials come from either
    ``sasl.jaas.config``, ``sasl.username``/``sasl.password`` or ``sasl.token``, exactly one way; SASL
    settings with a non-SASL protocol, and ``ssl.*`` files with a protocol without TLS, are refused
    rather than ignored, as every key must do something. An empty value counts as not set."""
    protocol_key = prefix + "security.protocol"
    protocol = _setting(config, prefix, "security.protocol") or "PLAINTEXT"
    if not isinstance(protocol, str) or protocol.upper() not in SECURITY_PROTOCOLS:
        raise SecurityConfigError(protocol_key, f"must be one of {', '.join(SECURITY_PROTOCOLS)}")
    protocol = protocol.upper()
    given = [name for name in SASL_KEYS if _setting(config, prefix, name) not in (None, "")]
    if not protocol.startswith("SASL_") and given:
        raise SecurityConfigError(prefix + given[0], f"needs {protocol_key} SASL_PLAINTEXT or SASL_SSL "
                                                     f"(it is {protocol})")
    tls = _tls_settings(config, prefix, protocol)
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, **tls)
    mechanism = _setting(config, prefix, "sasl.mechanism") or "PLAIN"
    if not isinstance(mechanism, str) or mechanism.upper() not in SASL_MECHANISMS:
        raise SecurityConfigError(prefix + "sasl.mechanism", f"must be one of {', '.join(SASL_MECHANISMS)}")
    if "sasl.token" in given:
        return ClientSecurity(protocol, mechanism.upper(), token=_token(config, prefix, given), **tls)
    username, password = _sasl_credentials(config, prefix, given)
    return ClientSecurity(protocol, mechanism.upper(), username, password, **tls)


def _tls_settings(config: Mapping[str, Any], prefix: str, protocol: str) -> dict[str, Any]:
    """The ``ssl.*`` fields of ``ClientSecurity``: file locations, the key's password, hostname checking."""
    algorithm_key = prefix + "ssl.endpoint.identification.algorithm"
    algorithm = _setting(config, prefix, "ssl.endpoint.identification.algorithm")
    algorithm = "https" if algorithm is None else algorithm
    if not isinstance(algorithm, str) or algorithm.lower() not in ENDPOINT_IDENTIFICATION_ALGORITHMS:
        raise SecurityConfigError(algorithm_key, "must be https (check the broker's host name) or empty (do not)")
    files = {name: _setting(config, prefix, name) for name in SSL_KEYS[:3]}
    given = [name for name, value in files.items() if value not in (None, "")]
    if protocol not in ("SSL", "SASL_SSL"):
        if given or algorithm == "":  # "https", the default, changes nothing without TLS
            raise SecurityConfigError(prefix + (given[0] if given else "ssl.endpoint.identification.algorithm"),
                                      f"needs {prefix}security.protocol SSL or SASL_SSL (it is {protocol})")
        return {}
    for name in given:
        if not isinstance(files[name], (str, Secret) if name == "ssl.key.password" else str):
            raise SecurityConfigError(prefix + name, "must be a string")
    if "ssl.key.password" in given and "ssl.keystore.location" not in given:
        raise SecurityConfigError(prefix + "ssl.key.password", f"needs {prefix}ssl.keystore.location "
                                                               "(the password decrypts the keystore's key)")
    key_password = files["ssl.key.password"] if "ssl.key.password" in given else None
    return {"truststore_location": files["ssl.truststore.location"] or None,
            "keystore_location": files["ssl.keystore.location"] or None,
            "key_password": key_password if key_password is None or isinstance(key_password, Secret)
            else Secret(key_password),
            "check_hostname": algorithm.lower() == "https"}


def _token(config: Mapping[str, Any], prefix: str, given: list[str]) -> str:
    """``sasl.token``: a token the broker's ``authenticate`` issued, used as is (there is no password)."""
    for name in ("sasl.username", "sasl.password", "sasl.jaas.config"):
        if name in given:
            raise SecurityConfigError(prefix + name, f"set either {prefix}sasl.token or a password, not both")
    token = _setting(config, prefix, "sasl.token")
    if isinstance(token, Secret):
        token = token.reveal()
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not token.isascii() or not token.isprintable():
        raise SecurityConfigError(prefix + "sasl.token", f"must be a token of at most {MAX_TOKEN_CHARS} "
                                                         "printable ASCII characters")
    return token


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
