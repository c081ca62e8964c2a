"""Every header that carries a transaction verdict takes 0 (unknown), 8 (commit) or 12 (rollback)
and nothing else, however the value is spelled or framed.

The headers: END_TRANSACTION (a producer's verdict, and its answer to a check, which is the same
header marked fromTransactionCheck) and OrbitMQ's END_TRANSACTION_BATCH. Their parser is the one
place that refuses: the handlers look the verdict up in a table that has no other key, so a value
let through would reach them as an internal error (issue 36: 4, the sys flag's "prepared" bit,
passed the transaction-bits mask). gRPC's EndTransaction maps its enum to these values itself
(tests/integration/test_broker_transaction_verdicts.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.codes import (
    OrbitMQRequestCode,
    RequestCode,
    ResponseCode,
    SerializeType,
    bad_request_code,
)
from orbitmq.protocol.command import RemotingCommand, decode_command, encode
from orbitmq.protocol.extension_headers import EndTransactionBatchRequestHeader
from orbitmq.protocol.headers import (
    TRANSACTION_VERDICTS,
    EndTransactionRequestHeader,
    Header,
)

SINGLE = {"producerGroup": "P", "tranStateTableOffset": "3", "commitLogOffset": "1024",
          "msgId": "M", "transactionId": "T"}
CHECK_ANSWER = {**SINGLE, "fromTransactionCheck": "true"}
BATCH = {"producerGroup": "P", "tranStateTableOffset": "3", "commitLogOffset": "1024",
         "transactionId": "T"}
HEADERS: list[tuple[type[Header], dict[str, str], int]] = [
    (EndTransactionRequestHeader, SINGLE, RequestCode.END_TRANSACTION),
    (EndTransactionRequestHeader, CHECK_ANSWER, RequestCode.END_TRANSACTION),
    (EndTransactionBatchRequestHeader, BATCH, OrbitMQRequestCode.END_TRANSACTION_BATCH),
]
IDS = ["end-transaction", "check-answer", "end-transaction-batch"]

# Every small number (4 is the sys flag's prepared type, inside the transaction bits), the other
# bits, negatives, and the ends of the Java types.
OUT_OF_SET = sorted({*range(-16, 64), 4, 0x4C, 0x108, 2**31 - 1, 2**31, -(2**31), 2**63 - 1,
                     -(2**63)} - set(TRANSACTION_VERDICTS))


def _spellings(value: int) -> list[Any]:
    """``value`` as clients send numbers: Java's text, the C++ client's JSON number, an integral
    JSON float (where a double holds it exactly), text with blanks around it."""
    exact = [float(value)] if abs(value) < 2**53 else []
    return [str(value), value, *exact, f" {value} "]


def _framed(code: int, fields: dict[str, Any], binary: bool) -> dict[str, str]:
    """The extFields the server decodes from a frame of ``fields``: a JSON header (values of any
    JSON type, as RemotingCommand cannot write them) or a binary (ROCKETMQ) one (text only)."""
    if binary:
        text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
        cmd = RemotingCommand(code, 7, 0, ext_fields=text, serialize_type=SerializeType.ROCKETMQ)
        frame = encode(cmd)
    else:
        header = json.dumps({"code": code, "language": "JAVA", "version": 401, "opaque": 7,
                             "flag": 0, "extFields": fields}).encode()
        frame = (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
    return decode_command(frame[4:]).ext_fields


@pytest.mark.parametrize(("cls", "base", "code"), HEADERS, ids=IDS)
def test_every_out_of_set_value_is_refused_naming_the_field(cls: type[Header], base: dict[str, str],
                                                             code: int) -> None:
    for value in OUT_OF_SET:
        for raw in _spellings(value):
            with pytest.raises(RemoteProtocolError, match=rf"{cls.__name__}\.commitOrRollback: "
                               rf"{value} is not a transaction verdict: 0 \(unknown\), 8 \(commit\) "
                               r"or 12 \(rollback\)"):
                cls.from_ext_fields({**base, "commitOrRollback": raw})


@pytest.mark.parametrize(("cls", "base", "code"), HEADERS, ids=IDS)
@pytest.mark.parametrize("binary", [False, True], ids=["json-header", "binary-header"])
def test_framed_whole_only_the_three_verdicts_pass(cls: type[Header], base: dict[str, str],
                                                   code: int, binary: bool) -> None:
    """Through the frame decoder, both header encodings: the values that parse are 0, 8, 12."""
    for value in [*OUT_OF_SET, *TRANSACTION_VERDICTS]:
        for raw in _spellings(value):
            fields = _framed(code, {**base, "commitOrRollback": raw}, binary)
            try:
                parsed = cls.from_ext_fields(fields).commit_or_rollback  # type: ignore[attr-defined]
            except RemoteProtocolError as e:
                assert "commitOrRollback" in str(e)
                continue
            assert parsed == value and value in TRANSACTION_VERDICTS, (raw, binary, parsed)


@pytest.mark.parametrize(("cls", "base", "code"), HEADERS, ids=IDS)
def test_the_verdicts_pass_in_every_spelling(cls: type[Header], base: dict[str, str],
                                             code: int) -> None:
    for value in TRANSACTION_VERDICTS:
        for raw in _spellings(value):
            parsed = cls.from_ext_fields({**base, "commitOrRollback": raw})
            assert parsed.commit_or_rollback == value  # type: ignore[attr-defined]


@pytest.mark.parametrize(("cls", "base", "code"), HEADERS, ids=IDS)
@pytest.mark.parametrize("raw", [None, "", " ", "commit", "COMMIT_TYPE", "8.5", 8.5, "0x8", "1e1",
                                 "true", True, "+4"])
def test_absent_or_not_a_number_is_refused(cls: type[Header], base: dict[str, str], code: int,
                                           raw: Any) -> None:
    fields = {**base, "commitOrRollback": raw} if raw is not None else dict(base)
    with pytest.raises(RemoteProtocolError, match="commitOrRollback"):
        cls.from_ext_fields(fields)


@pytest.mark.parametrize(("cls", "base", "code"), HEADERS, ids=IDS)
def test_a_refusal_is_answered_invalid_parameter(cls: type[Header], base: dict[str, str],
                                                 code: int) -> None:
    """The transport answers a header's RemoteProtocolError with the request family's code."""
    assert bad_request_code(code) is ResponseCode.INVALID_PARAMETER
