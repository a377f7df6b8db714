"""A Spark DDL subset, parsed without a JVM: ``name TYPE [NOT NULL] [COMMENT 'text'], ...`` to a
``pyarrow.Schema`` in the stored form (types.normalise), and back (``to_ddl``, for describe output).

Types, as Spark spells them (case-insensitive): BOOLEAN; TINYINT/BYTE, SMALLINT/SHORT, INT/INTEGER,
BIGINT/LONG; FLOAT/REAL, DOUBLE; DECIMAL/DEC/NUMERIC [(precision [, scale])] (Spark's default (10, 0));
STRING, VARCHAR(n) and CHAR(n) (stored as strings: Spark reads them so); BINARY; DATE; TIMESTAMP and
TIMESTAMP_LTZ (an instant: UTC), TIMESTAMP_NTZ. Names may be back-quoted (```a b```, a doubled back-quote
inside is one). Anything else is refused with its position. Comments are kept in the field's metadata
(``COMMENT_KEY``); they do not take part in compatibility.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from ads_spark.errors import InvalidConfigError
from ads_spark.schemas import types

COMMENT_KEY = b"ads.comment"
DECIMAL_DEFAULT = (10, 0)
DDL_CHARS_MAX = 100_000

_SIMPLE = {"BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "BYTE": pa.int8(), "SMALLINT": pa.int16(),
           "SHORT": pa.int16(), "INT": pa.int32(), "INTEGER": pa.int32(), "BIGINT": pa.int64(),
           "LONG": pa.int64(), "FLOAT": pa.float32(), "REAL": pa.float32(), "DOUBLE": pa.float64(),
           "STRING": pa.string(), "BINARY": pa.binary(), "DATE": pa.date32(),
           "TIMESTAMP": pa.timestamp("us", tz="UTC"), "TIMESTAMP_LTZ": pa.timestamp("us", tz="UTC"),
           "TIMESTAMP_NTZ": pa.timestamp("us")}
_SIZED_STRINGS = ("VARCHAR", "CHAR")
_DECIMALS = ("DECIMAL", "DEC", "NUMERIC")
_TOKEN = re.compile(r"\s*(?:(?P<quoted>`(?:[^`]|``)*`)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<number>\d+)"
                    r"|(?P<string>'(?:[^'\\]|\\.)*')|(?P<punct>[(),:<>]))")


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    at: int  # character position in the DDL, for the error message


def _tokens(ddl: str) -> list[_Token]:
    out, at = [], 0
    while at < len(ddl):
        if ddl[at:].strip() == "":
            break
        match = _TOKEN.match(ddl, at)
        if match is None or match.end() == at:
            raise InvalidConfigError(f"schema: unexpected {ddl[at:].strip()[:20]!r} at character {at}")
        kind = match.lastgroup or ""
        out.append(_Token(kind, match.group(kind), match.start(kind)))
        at = match.end()
    return out


class _Parser:
    def __init__(self, ddl: str):
        self.tokens = _tokens(ddl)
        self.i = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise InvalidConfigError(f"schema: {what} expected at the end")
        self.i += 1
        return token

    def keyword(self, *words: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "word" and token.text.upper() in words:
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> None:
        token = self.take(f"'{text}'")
        if token.text != text:
            raise InvalidConfigError(f"schema: '{text}' expected at character {token.at}, found {token.text!r}")

    def number(self, what: str) -> int:
        token = self.take(what)
        if token.kind != "number":
            raise InvalidConfigError(f"schema: {what} expected at character {token.at}, found {token.text!r}")
        return int(token.text)


def parse(ddl: str) -> pa.Schema:
    """The schema the DDL declares, normalised (types.normalise); InvalidConfigError naming the problem."""
    if len(ddl) > DDL_CHARS_MAX:
        raise InvalidConfigError(f"schema: {len(ddl)} characters, more than {DDL_CHARS_MAX}")
    if not ddl.strip():
        raise InvalidConfigError("schema: empty; a typed topic's schema needs at least one column")
    parser = _Parser(ddl)
    fields = []
    while True:
        fields.append(_column(parser))
        token = parser.peek()
        if token is None:
            break
        parser.expect(",")
    return types.normalise(pa.schema(fields))


def _column(parser: _Parser) -> pa.Field:
    token = parser.take("a column name")
    if token.kind == "quoted":
        name = token.text[1:-1].replace("``", "`")
    elif token.kind == "word":
        name = token.text
    else:
        raise InvalidConfigError(f"schema: a column name expected at character {token.at}, found {token.text!r}")
    if parser.peek() is not None and parser.peek().text == ":":  # Spark accepts "name: TYPE" too
        parser.i += 1
    arrow_type = _type(parser, name)
    nullable = True
    if parser.keyword("NOT"):
        if not parser.keyword("NULL"):
            raise InvalidConfigError(f"schema: column '{name}': NULL expected after NOT")
        nullable = False
    metadata = None
    if parser.keyword("COMMENT"):
        comment = parser.take("a quoted comment")
        if comment.kind != "string":
            raise InvalidConfigError(f"schema: column '{name}': a quoted comment expected at character {comment.at}")
        metadata = {COMMENT_KEY: re.sub(r"\\(.)", r"\1", comment.text[1:-1]).encode()}
    return pa.field(name, arrow_type, nullable, metadata)


def _type(parser: _Parser, column: str) -> pa.DataType:
    token = parser.take(f"the type of column '{column}'")
    word = token.text.upper() if token.kind == "word" else ""
    if word in _SIMPLE:
        return _SIMPLE[word]
    if word in _SIZED_STRINGS:
        parser.expect("(")
        parser.number(f"the length of {word} for column '{column}'")
        parser.expect(")")
        return pa.string()
    if word in _DECIMALS:
        precision, scale = DECIMAL_DEFAULT
        if parser.peek() is not None and parser.peek().text == "(":
            parser.i += 1
            precision, scale = parser.number("a decimal precision"), 0
            if parser.peek() is not None and parser.peek().text == ",":
                parser.i += 1
                scale = parser.number("a decimal scale")
            parser.expect(")")
        if not 1 <= precision <= types.DECIMAL128_PRECISION_MAX or not 0 <= scale <= precision:
            raise InvalidConfigError(f"schema: column '{column}': DECIMAL({precision}, {scale}) needs 1 <= "
                                     f"precision <= {types.DECIMAL128_PRECISION_MAX} and 0 <= scale <= precision")
        return pa.decimal128(precision, scale)
    raise InvalidConfigError(f"schema: column '{column}': unknown or unsupported type {token.text!r} at character "
                             f"{token.at} (supported: {', '.join(sorted(_SIMPLE))}, DECIMAL(p, s), VARCHAR(n), "
                             f"CHAR(n))")


_DDL_NAMES = {pa.bool_(): "BOOLEAN", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
              pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.string(): "STRING",
              pa.binary(): "BINARY", pa.date32(): "DATE", pa.timestamp("us", tz="UTC"): "TIMESTAMP",
              pa.timestamp("us"): "TIMESTAMP_NTZ"}


def to_ddl(schema: pa.Schema) -> str:
    """The DDL of a stored-form schema (``parse`` reads it back to the same columns)."""
    parts = []
    for field in schema:
        type_name = (f"DECIMAL({field.type.precision}, {field.type.scale})" if pa.types.is_decimal(field.type)
                     else _DDL_NAMES[field.type])
        name = field.name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", field.name) else \
            "`" + field.name.replace("`", "``") + "`"
        text = f"{name} {type_name}" + ("" if field.nullable else " NOT NULL")
        if field.metadata and COMMENT_KEY in field.metadata:
            comment = field.metadata[COMMENT_KEY].decode().replace("\\", "\\\\").replace("'", "\\'")
            text += f" COMMENT '{comment}'"
        parts.append(text)
    return ", ".join(parts)
