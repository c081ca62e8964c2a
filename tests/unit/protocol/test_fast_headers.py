"""The hot-path decoders (send V2, pull header, JSON command header) agree with the lenient ones.

Each fast path either returns exactly what the generic decoder returns or declines (None), and
the public API then takes the generic path: so on any input the public result, or the error it
raises, is the generic decoder's. Checked on generated field maps that mix the usual spellings
with blanks, padding, odd booleans, numbers instead of text and missing fields.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import headers as h
from orbitmq.protocol._fast_headers import pull_fast, send_v2_fast
from orbitmq.protocol._header_codec import _decode
from orbitmq.protocol.command import _json_header_fast, _json_header_lenient
from orbitmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader

_VALUES = st.one_of(
    st.sampled_from(["", " ", "0", "1", "7", " 12 ", "-3", "1_0", "x", "true", "False", "YES",
                     "off", "n", "on ", "1.5", "TAG", "*", "UNIQ_KEY\x01A\x02", "١٢", "-1",
                     "2048", "2147483648", "-2147483649", "9223372036854775808"]),
    st.integers(-5, 5), st.booleans(), st.none(), st.floats(allow_nan=False, width=16),
    st.text(max_size=4),
)


def _fields(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(names + ["extra"]), _VALUES, max_size=len(names) + 1)


def _generic(cls: type[h.Header], fields: dict[str, Any], names: Any) -> Any:
    try:
        return _decode(cls, fields, names)
    except RemoteProtocolError as e:
        return type(e)


SEND_V2 = sorted(SendMessageRequestHeader.V2_NAMES.values())
PULL = sorted(PullMessageRequestHeader.wire_names().values())


@settings(max_examples=400, deadline=None)
@given(_fields(SEND_V2))
def test_send_v2_fast_path_agrees_with_generic(fields: dict[str, Any]) -> None:
    fast = send_v2_fast(SendMessageRequestHeader, fields)
    if fast is not None:
        assert fast == _generic(SendMessageRequestHeader, fields, SendMessageRequestHeader.V2_NAMES)


@settings(max_examples=400, deadline=None)
@given(_fields(PULL))
def test_pull_fast_path_agrees_with_generic(fields: dict[str, Any]) -> None:
    fast = pull_fast(PullMessageRequestHeader, fields)
    if fast is not None:
        assert fast == _generic(PullMessageRequestHeader, fields, None)


def test_fast_paths_take_the_usual_headers() -> None:
    send = {"a": "g", "b": "T", "c": "TBW102", "d": "8", "e": "3", "f": "0", "g": "1700000000000",
            "h": "0", "i": "UNIQ_KEY\x01AB\x02", "j": "0", "k": "false", "m": "false"}
    got = send_v2_fast(SendMessageRequestHeader, send)
    assert got == SendMessageRequestHeader("g", "T", "TBW102", 8, 3, 0, 1700000000000, 0,
                                           "UNIQ_KEY\x01AB\x02")
    assert SendMessageRequestHeader.from_any_ext_fields(send) == got
    pull = {"consumerGroup": "c", "topic": "T", "queueId": "1", "queueOffset": "64",
            "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0",
            "suspendTimeoutMillis": "1000", "subscription": "*", "subVersion": "0",
            "expressionType": "TAG"}
    got_pull = pull_fast(PullMessageRequestHeader, pull)
    assert got_pull is not None and got_pull.queue_offset == 64 and got_pull.subscription == "*"
    assert PullMessageRequestHeader.from_ext_fields(pull) == got_pull


def test_public_api_still_reports_missing_and_bad_fields() -> None:
    with pytest.raises(RemoteProtocolError, match="'b'"):
        SendMessageRequestHeader.from_v2_ext_fields({"a": "g", "c": "x", "d": "1", "e": "1",
                                                     "f": "0", "g": "0", "h": "0"})
    with pytest.raises(RemoteProtocolError, match="queueOffset"):
        PullMessageRequestHeader.from_ext_fields({"consumerGroup": "c", "topic": "T",
                                                  "queueId": "1", "queueOffset": "x",
                                                  "maxMsgNums": "1", "sysFlag": "0",
                                                  "commitOffset": "0",
                                                  "suspendTimeoutMillis": "0"})


_HEADER_VALUES = st.one_of(st.integers(-(2**33), 2**33), st.none(), st.booleans(),
                           st.sampled_from(["JAVA", "GO", "cpp", "PYTHON", "", "x"]),
                           st.floats(allow_nan=False, width=16), st.text(max_size=3))


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "code": _HEADER_VALUES, "opaque": _HEADER_VALUES, "flag": _HEADER_VALUES,
    "version": _HEADER_VALUES, "language": _HEADER_VALUES, "remark": _HEADER_VALUES,
    "extFields": st.one_of(st.none(), st.dictionaries(st.text(max_size=2), _VALUES, max_size=3)),
}))
def test_json_header_fast_path_agrees_with_generic(obj: dict[str, Any]) -> None:
    fast = _json_header_fast(dict(obj))
    if fast is None:
        return
    assert fast == _json_header_lenient(dict(obj))


_BOUNDARIES = ["-9223372036854775809", "-9223372036854775808", "-2147483649", "-2147483648",
               "-2", "-1", "0", "1", "31", "32", "2047", "2048", "2147483647", "2147483648",
               "9223372036854775807", "9223372036854775808", "99999999999999999999"]
_SEND_OK = {"a": "g", "b": "T", "c": "TBW102", "d": "8", "e": "3", "f": "0", "g": "1700000000000",
            "h": "0", "j": "0", "l": "3"}
_PULL_OK = {"consumerGroup": "c", "topic": "T", "queueId": "1", "queueOffset": "64",
            "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "1000",
            "subVersion": "0", "maxMsgBytes": "100"}


@pytest.mark.parametrize("value", _BOUNDARIES)
def test_fast_paths_check_the_same_ranges_as_generic(value: str) -> None:
    """At every range boundary of every integer field, a fast result equals the generic one, and
    when the generic decoder refuses, the fast path declines."""
    for cls, base, fast, names in ((SendMessageRequestHeader, _SEND_OK, send_v2_fast,
                                    SendMessageRequestHeader.V2_NAMES),
                                   (PullMessageRequestHeader, _PULL_OK, pull_fast, None)):
        for key in base:
            if key in ("a", "b", "c", "consumerGroup", "topic"):
                continue
            fields = {**base, key: value}
            generic = _generic(cls, fields, names)
            got = fast(cls, fields)
            if generic is RemoteProtocolError:
                assert got is None, (key, value)
            else:
                assert got is None or got == generic, (key, value)
