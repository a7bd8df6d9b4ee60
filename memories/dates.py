"""A note's date and the time bounds of search filters: ISO 8601 read one way everywhere.

A note's date is written as ISO 8601: a day (``2025-03-01``) or a time (``2025-03-01T09:30:00``, with its UTC offset
when it has one). A day or a time without an offset is local time, as a person writing a note means it. Only
``datetime``'s own parsers are used (no pattern over user text), on at most :data:`MAX_DATE_CHARS` code points.
"""

from __future__ import annotations

import datetime

MAX_DATE_CHARS = 64
"""Longest text read as a date (code points): an ISO 8601 time with fractions and an offset is about 32."""

_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def note_date(value: object) -> str | None:
    """A front-matter value as a note's date: a YAML date or time, or a string in ISO 8601, as ISO 8601 (a day stays
    a day); ``None`` for anything else.

    >>> note_date("2025-03-01"), note_date(" 2025-03-01 09:30+08:00 "), note_date("March 1st"), note_date(20250301)
    ('2025-03-01', '2025-03-01T09:30:00+08:00', None, None)
    """
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > MAX_DATE_CHARS:
        return None
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    try:
        return datetime.datetime.fromisoformat(text).isoformat()
    except ValueError:
        return None


def timestamp(text: str, *, end_of_day: bool = False) -> float | None:
    """Unix seconds of an ISO 8601 day or time (local time when it names no offset; a day is its first instant, or
    with ``end_of_day`` its last microsecond); ``None`` when ``text`` is not one or is out of range.

    >>> gap = timestamp("2025-03-02") - timestamp("2025-03-01", end_of_day=True)
    >>> timestamp("1970-01-01T01:00:00+01:00"), 0 < gap < 1e-5
    (0.0, True)
    """
    text = text.strip()
    if not text or len(text) > MAX_DATE_CHARS:
        return None
    try:
        day = datetime.date.fromisoformat(text)
    except ValueError:
        day = None
    try:
        if day is not None:
            moment = datetime.datetime(day.year, day.month, day.day)
            if end_of_day:
                moment += datetime.timedelta(days=1, microseconds=-1)
        else:
            moment = datetime.datetime.fromisoformat(text)
        return moment.timestamp()
    except (ValueError, OverflowError, OSError):  # not ISO 8601, or a year the platform's clock cannot reach
        return None


def time_bound(text: str, now: float, *, end: bool) -> float:
    """A ``--since`` (``end`` false) or ``--until`` (``end`` true) value as Unix seconds: a duration back from
    ``now`` (``30m``, ``12h``, ``7d``, ``2w``), or an ISO 8601 day or time (local time without an offset). A day
    given to ``--until`` includes that whole day.

    Raises:
        ValueError: anything else (the message says what is accepted).

    >>> time_bound("2d", 1_000_000.0, end=False)
    827200.0
    """
    text = text.strip()
    unit = text[-1:]
    digits = text[:-1]
    if unit in _UNITS and digits.isascii() and digits.isdigit() and len(digits) <= 9:
        return now - int(digits) * _UNITS[unit]
    moment = timestamp(text, end_of_day=end)
    if moment is None:
        raise ValueError(f"{text[:MAX_DATE_CHARS]!r} is not a duration (30m, 12h, 7d, 2w) or an ISO 8601 date or time")
    return moment
