"""The table operator's stored pending versions, decoded (``enrichment.pending_versions``)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.pipelines.enrichment import pending_versions


def encoded(versions: list[tuple[int, str | None]]) -> bytes:
    """The layout ``ReferentialTable.encode`` (Java) writes, written again independently."""
    if not versions:
        return b""
    out = struct.pack(">i", len(versions))
    out += b"".join(struct.pack(">q", ts) for ts, _ in versions)
    for _, name in versions:
        if name is None:
            out += struct.pack(">i", -1)
        else:
            text = name.encode()
            out += struct.pack(">i", len(text)) + text
    return out


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", []),
        (None, []),
        # one version: count 1, ts 5, name '"a"' (3 bytes)
        (b"\0\0\0\x01" + b"\0" * 7 + b"\x05" + b"\0\0\0\x03" + b'"a"', [(5, '"a"')]),
        # a tombstone: length -1, no bytes
        (b"\0\0\0\x01" + b"\0" * 7 + b"\x07" + b"\xff\xff\xff\xff", [(7, None)]),
        # a name that is not ASCII, then a tombstone, log order kept
        (
            encoded([(1_795_665_636_742, '"caf\u00e9"'), (-3, None)]),
            [(1_795_665_636_742, '"caf\u00e9"'), (-3, None)],
        ),
    ],
)
def test_pending_versions_decodes_the_operators_layout(
    data: bytes | None, expected: list[tuple[int, str | None]]
) -> None:
    assert pending_versions(data) == expected


def test_pending_versions_rejects_bytes_after_the_last_version() -> None:
    with pytest.raises(ValueError, match="1 bytes after the last version"):
        pending_versions(encoded([(1, '"a"')]) + b"x")


@given(
    st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.one_of(st.none(), st.text())),
        max_size=20,
    )
)
def test_pending_versions_round_trips_any_versions(
    versions: list[tuple[int, str | None]],
) -> None:
    assert pending_versions(encoded(versions)) == versions
