"""Merge by the revision graph, never by wall clock: what a pull adds to one record, erases from it, and which heads
it then has.

A revision descends from its parents; a record's heads are its revisions that no other names as a parent. One head:
the record is settled. Several: siblings made on different devices, all kept, the record in *conflict* until an
update (whose parents are every head) resolves it. A deletion is a revision too (``deleted``), whose ``deletes``
lists every revision it erased (ids only, kept forever): those are erased wherever the deletion arrives and never
imported again. A revision made against a deleted record (its parents erased by a deletion it does not descend
from) is an edit against a delete: kept beside the deletion, a conflict, never silently lost or resurrected. A
record whose every head is a deletion is deleted.

A revision's depth must be 1 + its deepest parent's (:func:`memories.vault.rules.check_depth`, the rule local writes
keep): it is checked when its parents are here, so a revision waiting for them is checked when they arrive, and a
deletion whose erased parents never arrive is held to the parents that are here. One that breaks it is
``invalid``: never added.

Pure functions over ids: the callers authenticate revisions, check the rest of the rules and read deletion lists
first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from memories.errors import MemoriesError
from memories.vault.rules import check_depth


class Node(NamedTuple):
    """One revision of a record as the merge sees it: id, depth, parent ids, whether it is a deletion and (for a
    deletion) the ids it erased."""

    id: str
    revision: int
    parents: tuple[str, ...]
    deleted: bool = False
    deletes: frozenset[str] = frozenset()


class RecordMerge(NamedTuple):
    """The outcome for one record: ``add``, the incoming revisions to store (parents before children); ``erase``,
    stored revision ids to erase; ``heads``, the record's heads afterwards (deletions included); ``waiting``,
    incoming revisions whose parents are not here yet (left for a later pull); ``dropped``, incoming revisions a
    deletion already erased; ``invalid``, incoming revisions whose depth is not 1 + their deepest parent's."""

    add: list[Node]
    erase: set[str]
    heads: list[Node]
    waiting: list[Node]
    dropped: list[Node]
    invalid: list[Node]

    @property
    def changed(self) -> bool:
        return bool(self.add or self.erase)


def heads(nodes: Iterable[Node]) -> list[Node]:
    """The nodes no other node names as a parent, by depth then id."""
    nodes = list(nodes)
    parents = {parent for node in nodes for parent in node.parents}
    return sorted((node for node in nodes if node.id not in parents), key=lambda node: (node.revision, node.id))


def erased_by(nodes: Iterable[Node]) -> set[str]:
    """Every revision id some deletion among ``nodes`` erased."""
    return {erased for node in nodes if node.deleted for erased in node.deletes}


def merge_record(stored: dict[str, Node], incoming: Iterable[Node]) -> RecordMerge:
    """Merge ``incoming`` revisions into a record's ``stored`` ones (id -> node; deletions included, erased
    revisions absent).

    An incoming revision is added once each of its parents is stored, added in this merge, or erased by a deletion
    (so an edit made against a deleted record is kept); a revision a deletion erased is never added. A deletion
    never waits for the parents it erased itself: on a device that joins after a record was deleted, those
    revisions never arrive (the push that carried the deletion removed their payloads), and the deletion is all
    there is to keep. The result does not depend on the order of ``incoming``, nor on how a set of revisions is
    split between pulls.
    """
    erased = erased_by(stored.values())
    pending = sorted(
        {node.id: node for node in incoming if node.id not in stored}.values(), key=lambda n: (n.revision, n.id)
    )
    added: dict[str, Node] = {}
    invalid: dict[str, Node] = {}
    progress = True
    while progress:
        progress = False
        for node in pending:
            if node.id in added or node.id in invalid or (not node.deleted and node.id in erased):
                continue
            if all(
                parent in stored or parent in added or parent in erased or parent in node.deletes
                for parent in node.parents
            ):
                if not _deep_enough(node, stored, added):
                    invalid[node.id] = node
                    continue
                added[node.id] = node
                if node.deleted:
                    erased |= node.deletes
                progress = True
    # A deletion added late in the loop may erase a revision added before it.
    add = [node for node in added.values() if node.deleted or node.id not in erased]
    dropped = [node for node in pending if not node.deleted and node.id in erased and node.id not in invalid]
    waiting = [node for node in pending if node.id not in added and node.id not in invalid and node not in dropped]
    erase = {node_id for node_id, node in stored.items() if not node.deleted and node_id in erased}
    live = [node for node in [*stored.values(), *add] if node.deleted or node.id not in erased]
    return RecordMerge(add, erase, heads(live), waiting, dropped, list(invalid.values()))


def _deep_enough(node: Node, stored: dict[str, Node], added: dict[str, Node]) -> bool:
    """The node's depth keeps the rule against the parents that are here (every one, unless a deletion erased
    some)."""
    depths = [
        (stored.get(parent) or added[parent]).revision for parent in node.parents if parent in stored or parent in added
    ]
    try:
        check_depth(node.revision, depths, every_parent=len(depths) == len(node.parents))
    except MemoriesError:
        return False
    return True


def is_deleted(record_heads: list[Node]) -> bool:
    """Every head is a deletion (and there is at least one)."""
    return bool(record_heads) and all(node.deleted for node in record_heads)


def in_conflict(record_heads: list[Node]) -> bool:
    """More than one head, and not every one a deletion."""
    return len(record_heads) > 1 and not is_deleted(record_heads)
