"""Merge by the revision graph (issue 10): supersede, siblings, deletions and edits against them, and that any two
devices that have seen the same revisions agree, whatever the order and however pulls split them."""

from __future__ import annotations

import hashlib
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from memories.vault.merge import Node, RecordMerge, heads, in_conflict, is_deleted, merge_record

_ids = itertools.count()


def _node(*parents: Node, deletes: tuple[Node, ...] | None = None) -> Node:
    revision = 1 + max((p.revision for p in parents), default=0)
    node_id = hashlib.sha256(str(next(_ids)).encode()).hexdigest()
    if deletes is None:
        return Node(node_id, revision, tuple(sorted(p.id for p in parents)))
    return Node(node_id, revision, tuple(sorted(p.id for p in parents)), True, frozenset(d.id for d in deletes))


def _apply(stored: dict[str, Node], merged: RecordMerge) -> dict[str, Node]:
    kept = {node_id: node for node_id, node in stored.items() if node_id not in merged.erase}
    return kept | {node.id: node for node in merged.add}


def _store(*nodes: Node) -> dict[str, Node]:
    return {node.id: node for node in nodes}


def test_a_descendant_supersedes_and_siblings_are_both_kept_until_a_merge() -> None:
    root = _node()
    child = _node(root)
    merged = merge_record(_store(root), [child])
    assert merged.add == [child] and merged.heads == [child] and not in_conflict(merged.heads)

    left, right = _node(child), _node(child)
    merged = merge_record(_store(root, child, left), [right])
    assert {n.id for n in merged.heads} == {left.id, right.id} and in_conflict(merged.heads)
    both = _node(left, right)
    assert merge_record(_store(root, child, left, right), [both]).heads == [both]


def test_a_deletion_erases_what_it_lists_and_a_stale_payload_never_comes_back() -> None:
    first = _node()
    second = _node(first)
    deletion = _node(second, deletes=(first, second))
    merged = merge_record(_store(first, second), [deletion])
    assert merged.erase == {first.id, second.id} and merged.heads == [deletion] and is_deleted(merged.heads)
    after = _apply(_store(first, second), merged)
    again = merge_record(after, [first, second])
    assert not again.changed and {n.id for n in again.dropped} == {first.id, second.id}


def test_an_edit_against_a_delete_is_a_conflict_on_both_devices() -> None:
    first = _node()
    deletion = _node(first, deletes=(first,))
    edit = _node(first)
    on_deleter = merge_record(_store(deletion), [edit])
    on_editor = merge_record(_store(first, edit), [deletion])
    assert on_deleter.add == [edit] and on_editor.erase == {first.id}
    for merged in (on_deleter, on_editor):
        assert {n.id for n in merged.heads} == {deletion.id, edit.id}
        assert in_conflict(merged.heads) and not is_deleted(merged.heads)


def test_a_revision_whose_parent_has_not_arrived_waits() -> None:
    first = _node()
    second = _node(first)
    third = _node(second)
    merged = merge_record(_store(first), [third])
    assert merged.waiting == [third] and not merged.changed
    assert merge_record(_store(first), [third, second]).heads == [third]


def test_a_deletion_whose_erased_parents_never_arrive_is_kept_at_once() -> None:
    """A device that joins after a record was deleted finds only the deletion: the push that carried it removed the
    payloads of what it erased. The deletion is kept (nothing waits for parents that will never come), and a stale
    copy of an erased revision that turns up later is dropped."""
    first = _node()
    second = _node(first)
    deletion = _node(second, deletes=(first, second))
    merged = merge_record({}, [deletion])
    assert merged.add == [deletion] and merged.waiting == [] and is_deleted(merged.heads)
    again = merge_record(_apply({}, merged), [second])
    assert not again.changed and again.dropped == [second]
    on_a_device_with_the_first = merge_record(_store(first), [deletion])
    assert on_a_device_with_the_first.erase == {first.id} and on_a_device_with_the_first.heads == [deletion]


def test_nothing_incoming_changes_nothing() -> None:
    first = _node()
    merged = merge_record(_store(first), [])
    assert not merged.changed and merged.heads == [first]


# -- property: devices that saw the same revisions agree -------------------------------------------------------

_OPS = st.lists(
    st.tuples(st.sampled_from(["edit", "delete", "sync"]), st.integers(0, 2), st.integers(0, 2)), max_size=25
)


def _merge_into(view: dict[str, Node], nodes: list[Node]) -> dict[str, Node]:
    return _apply(view, merge_record(view, nodes))


@settings(max_examples=300, deadline=None)
@given(_OPS, st.randoms(use_true_random=False))
def test_devices_converge_whatever_the_order(ops: list[tuple[str, int, int]], rng) -> None:  # type: ignore[no-untyped-def]
    """Three devices edit, delete and sync one record at random; every revision ever made is kept in a log (the
    folder). Each device then pulls a random part of it (what the sync tool delivered so far, shuffled) and then
    all of it: they all hold the same revisions and heads."""
    root = _node()
    views = [_store(root) for _ in range(3)]
    log = [root]
    for op, device, other in ops:
        view = views[device]
        current = heads(view.values())
        if op == "edit":
            node = _node(*current)
        elif op == "delete":
            if is_deleted(current):
                continue
            node = _node(*current, deletes=tuple(n for n in view.values() if not n.deleted))
        else:
            views[device] = _merge_into(view, list(views[other].values()))
            continue
        views[device] = _merge_into(view, [node])
        log.append(node)
    final = []
    for view in views:
        shuffled = list(log)
        rng.shuffle(shuffled)
        for part in (shuffled[: rng.randint(0, len(shuffled))], shuffled):
            view = _merge_into(view, part)
        final.append(view)
    assert all(set(view) == set(final[0]) for view in final)
    assert all(heads(view.values()) == heads(final[0].values()) for view in final)
    erased = {e for n in final[0].values() if n.deleted for e in n.deletes}
    assert not erased & {n.id for n in final[0].values() if not n.deleted}  # nothing erased came back
