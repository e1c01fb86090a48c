"""Build contexts in flight are bounded per org and on the server before a byte is read: one
org's many uploads at once are refused 429 `too_many_builds` past its share (they each held up
to 64 MiB), another org's still go, and a context that ended frees its place."""

from __future__ import annotations

import pytest

from sanbox.control.build_uploads import BuildUploads
from sanbox.control.errors import TooManyBuildsError

pytestmark = pytest.mark.unit


def test_contexts_in_flight_are_bounded_per_org_and_in_all() -> None:
    uploads = BuildUploads(per_org=2, in_all=3)
    with uploads.admitted("org_a"), uploads.admitted("org_a"):
        with pytest.raises(TooManyBuildsError, match="this org"), uploads.admitted("org_a"):
            pass
        with (
            uploads.admitted("org_b"),  # its own share
            pytest.raises(TooManyBuildsError, match="this server"),
            uploads.admitted("org_c"),
        ):
            pass
    with pytest.raises(RuntimeError), uploads.admitted("org_a"):  # a failed one frees its place
        raise RuntimeError("unpacking failed")
    with uploads.admitted("org_a"), uploads.admitted("org_a"), uploads.admitted("org_c"):
        pass
