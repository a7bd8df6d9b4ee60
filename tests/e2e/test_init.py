"""Issue 12, smaller things: what ``init`` checks before asking for a passphrase, and about the passphrase."""

from __future__ import annotations

from tests.fixtures.daemon import PASSPHRASE, HomeDir, run_on_terminal


def test_init_refuses_a_short_passphrase_unless_allowed(home: HomeDir) -> None:
    home.start()
    error = home.fails("invalid_passphrase", "init", "--passphrase-stdin", stdin="seven77\n")
    assert "at least 8" in error["message"] and error["details"] == {"min_chars": 8}
    assert not home.status()["initialized"]
    assert home.ok("init", "--passphrase-stdin", "--allow-short-passphrase", stdin="short\n")["locked"] is False
    home.ok("lock")
    home.ok("unlock", "--passphrase-stdin", stdin="short\n")  # unlock never checks the length


def test_init_of_an_initialized_home_fails_before_asking(vault: HomeDir) -> None:
    error = vault.fails("already_initialized", "init")  # no --passphrase-stdin and no terminal: no prompt needed
    assert "unlock" in error["message"]
    shown = run_on_terminal(vault, ["init"], [])
    assert shown.code == 1 and "already_initialized" in shown.stdout and "Passphrase" not in shown.stdout


def test_init_on_a_terminal_says_why_it_asks_again(home: HomeDir) -> None:
    home.start()
    shown = run_on_terminal(
        home,
        ["init"],
        [
            ("Passphrase: ", ""),
            ("Passphrase: ", "   "),
            ("Passphrase: ", "short"),
            ("Passphrase: ", PASSPHRASE),
            ("Repeat passphrase: ", PASSPHRASE),
        ],
    )
    assert shown.code == 0, shown.stdout
    assert shown.stdout.count("cannot be empty or only spaces; try again") == 2
    assert "has 5 characters; use at least 8" in shown.stdout
    assert home.status()["locked"] is False
