"""Issue 12, defect 7: the ways down from a vault that grew too large: rename, delete, and moving records."""

from __future__ import annotations

from tests.fixtures.daemon import HomeDir, run_on_terminal


def _add(home: HomeDir, vault: str, title: str, body: str) -> str:
    return home.ok("memory", "add", vault, "--title", title, "--body", body)["id"]


def test_rename_keeps_id_and_records_and_refuses_a_taken_name(vault: HomeDir) -> None:
    record = _add(vault, "notes", "kept", "renamed vaults keep their records")
    before = vault.ok("vault", "show", "notes")
    vault.ok("vault", "create", "other")
    renamed = vault.ok("vault", "rename", "notes", "journal")
    assert (renamed["id"], renamed["name"]) == (before["id"], "journal")
    assert vault.ok("memory", "read", "journal", record)["title"] == "kept"
    assert vault.ok("rag", "search", "journal", "renamed")["results"][0]["asset_id"] == record
    vault.fails("vault_not_found", "vault", "show", "notes")
    vault.fails("vault_name_taken", "vault", "rename", "journal", "other")
    vault.fails("vault_name_taken", "vault", "rename", "journal", vault.ok("vault", "show", "other")["id"])
    vault.fails("invalid_vault_name", "vault", "rename", "journal", " padded")
    assert vault.ok("vault", "rename", before["id"], "notes")["name"] == "notes"  # by id too


def test_delete_needs_yes_without_a_terminal_and_removes_everything(vault: HomeDir) -> None:
    _add(vault, "notes", "gone", "deleted vaults leave nothing behind zyxwv")
    vault.ok("rag", "search", "notes", "zyxwv")  # the index worker holds a cache of it
    grant = vault.ok("grant", "create", "notes", "--client", "tester", "--scope", "search")
    vault.ok("vault", "create", "kept")
    other = vault.ok("grant", "create", "kept", "--client", "tester", "--scope", "search")
    vault.fails("confirmation_required", "vault", "delete", "notes")
    assert vault.ok("vault", "show", "notes")["records"] == 1
    deleted = vault.ok("vault", "delete", "notes", "--yes")
    assert (deleted["name"], deleted["records"], deleted["revoked_grants"]) == ("notes", 1, 1)
    states = {g["id"]: g["state"] for g in vault.ok("grant", "list")["grants"]}
    assert states == {grant["id"]: "revoked", other["id"]: "active"}
    vault.ok("vault", "delete", "kept", "--yes")
    vault.fails("vault_not_found", "vault", "show", "notes")
    assert vault.ok("vault", "list")["vaults"] == []
    recreated = vault.ok("vault", "create", "notes")  # the name is free again; nothing of the old vault shows
    assert recreated["id"] != deleted["id"]
    assert vault.ok("rag", "search", "notes", "zyxwv")["results"] == []
    assert vault.ok("memory", "list", "notes")["records"] == []


def test_delete_asks_on_a_terminal(vault: HomeDir) -> None:
    _add(vault, "notes", "asked", "body")
    refused = run_on_terminal(vault, ["vault", "delete", "notes"], [("and its 1 record?", "n")])
    assert refused.code == 1 and "error: cancelled: " in refused.stdout
    assert vault.ok("vault", "show", "notes")["records"] == 1
    confirmed = run_on_terminal(vault, ["vault", "delete", "notes"], [("This cannot be undone", "y")])
    assert confirmed.code == 0, confirmed.stdout
    vault.fails("vault_not_found", "vault", "show", "notes")


def test_move_keeps_id_revisions_and_times_under_the_new_vaults_key(vault: HomeDir) -> None:
    vault.ok("vault", "create", "archive")
    record = _add(vault, "notes", "first title", "moving records between vaults")
    vault.ok("memory", "update", "notes", record, "--title", "second title", "--meta", "topic=moving")
    before = [vault.ok("memory", "read", "notes", record, "--revision", str(n)) for n in (1, 2)]
    vault.ok("rag", "search", "notes", "moving")  # both caches exist before the move
    vault.ok("rag", "search", "archive", "moving")
    assert vault.ok("memory", "move", "notes", record, "--to", "archive") == {"id": record, "revision": 2}
    after = [vault.ok("memory", "read", "archive", record, "--revision", str(n)) for n in (1, 2)]
    moved = {"revision_id"}  # a revision id binds its vault: the moved revisions have new ids
    assert [{k: v for k, v in r.items() if k not in moved} for r in after] == [
        {k: v for k, v in r.items() if k not in moved} for r in before
    ]
    assert not {r["revision_id"] for r in after} & {r["revision_id"] for r in before}
    vault.fails("record_not_found", "memory", "read", "notes", record)
    assert vault.ok("rag", "search", "notes", "moving")["results"] == []
    assert vault.ok("rag", "search", "archive", "moving")["results"][0]["asset_id"] == record
    assert [r["id"] for r in vault.ok("memory", "list", "archive")["records"]] == [record]
    vault.fails("invalid_argument", "memory", "move", "archive", record, "--to", "archive")
    vault.fails("record_not_found", "memory", "move", "notes", record, "--to", "archive")
    vault.fails("vault_not_found", "memory", "move", "archive", record, "--to", "nowhere")
    vault.ok("memory", "update", "archive", record, "--body", "a third revision after the move")
    assert vault.ok("memory", "read", "archive", record)["revision"] == 3
