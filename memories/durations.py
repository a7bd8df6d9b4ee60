"""A time left, said as a person says it: one rule for the CLI's ``jobs`` and ``rag status`` and the daemon's search
warnings. Cheap to import (the CLI's start-up path)."""

from __future__ import annotations


def about(seconds: float) -> str:
    """``seconds`` (a time left, seconds) rounded to what a person says: seconds under 90 s, whole minutes (to the
    nearest) under an hour, hours and minutes beyond. It said ``about 2 min`` for 166 s, by flooring the minutes.

    >>> about(7.3), about(89.4), about(166), about(3569), about(3600), about(5460)
    ('7 s', '89 s', '3 min', '59 min', '1 h 0 min', '1 h 31 min')
    """
    whole = max(0, round(seconds))
    if whole < 90:
        return f"{whole} s"
    minutes = round(whole / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
