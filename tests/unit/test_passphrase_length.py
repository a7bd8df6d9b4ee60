"""A short new passphrase is refused naming the option that accepts it only where the command has one."""

from __future__ import annotations

import pytest

from memories.errors import MemoriesError
from memories.limits import check_passphrase_length


@pytest.mark.parametrize(("override", "told"), [("--allow-short-passphrase", True), (None, False)])
def test_the_message_names_an_override_only_where_the_command_has_it(override: str | None, told: bool) -> None:
    """``sync init`` suggested ``--allow-short-passphrase``, which only ``init`` has (a new-user trial)."""
    with pytest.raises(MemoriesError) as short:
        check_passphrase_length("seven77", override)
    assert short.value.code == "invalid_passphrase" and short.value.details == {"min_chars": 8}
    assert short.value.message.startswith("the passphrase has 7 characters; use at least 8")
    assert ("--allow-short-passphrase" in short.value.message) is told
    check_passphrase_length("eight888", override)
