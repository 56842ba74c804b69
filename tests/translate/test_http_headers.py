"""HTTP header values read the same way by adapters and frontends."""

from __future__ import annotations

import email.utils
import time

from bridge.translate.http import retry_after_seconds


def test_retry_after_reads_seconds_and_dates_and_refuses_what_is_no_delay():
    assert retry_after_seconds("120") == 120.0 and retry_after_seconds(" 1.5 ") == 1.5
    assert retry_after_seconds("-3") == 0.0
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after_seconds(soon) <= 31
    # float() takes these, but they are no delay a client could wait
    for value in (None, "", "inf", "Infinity", "-inf", "nan", "soon"):
        assert retry_after_seconds(value) is None, value
    # past a day, a day: a caller told to wait 1e21 seconds would never call again
    years = email.utils.formatdate(time.time() + 3e8, usegmt=True)
    assert retry_after_seconds("1" + "0" * 21) == retry_after_seconds(years) == 86_400.0
