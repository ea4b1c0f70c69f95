"""The suffix trie Arctic Inference's SuffixDecoding keeps (``csrc/suffix_decoding/
suffix_tree.cc`` @ 9d4643881608178f0f58a33d1b61919ca246997f: ``SuffixTree::append``,
``_increment_count``, ``_decrement_count``, ``remove``), for :mod:`simspec.engine.lookup.suffix`.

A node's count is the number of occurrences of its string (up to ``max_tree_depth`` tokens)
in the tree's sequences. Among children of equal count arctic keeps an order that depends on
history (``_increment_count``: a child that was first of its count moves to the front of the
next count, any other to its back; a new child goes last; ``_decrement_count``: to the front
of the count below); :class:`SuffixTrie` keeps exactly that order, since the first child is
the one speculated.

The trie is uncompressed but lazy: a node seen once (count 1) stores where its one occurrence
ends and its subtree stays implicit (every count below is 1), which keeps memory to about the
repeated substrings.
"""

from __future__ import annotations

from collections import deque


class Node:
    """One string of the trie. ``kids`` is None for a node seen once (a frontier): its subtree
    is the rest of its one occurrence, ``seq[end:]``, all counts 1."""

    __slots__ = ("token", "depth", "count", "kids", "head", "groups", "top", "seq", "end")

    def __init__(self, token: int, depth: int, seq: list[int], end: int) -> None:
        self.token = token
        self.depth = depth
        self.count = 1
        self.kids: dict[int, Node] | None = None
        self.head: Node | None = None  # arctic's head_child: first of the highest count
        # children by count, each list in arctic's sibling order (None while <= 1 child)
        self.groups: dict[int, list[Node]] | None = None
        self.top = 0  # highest child count (valid when groups is set)
        self.seq = seq  # the sequence holding the occurrence (read while a frontier)
        self.end = end  # index just past the occurrence in seq


class SuffixTrie:
    """Counts of every substring of up to ``max_depth`` tokens of some sequences, children kept
    in arctic's order. Sequences grow by :meth:`append` and leave by :meth:`remove`."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = Node(-1, 0, [], 0)
        self.root.count = 0
        # the root is always materialised: its children, typed as such
        self.root_kids: dict[int, Node] = {}
        self.root.kids = self.root_kids
        self.seqs: dict[int, list[int]] = {}
        # per sequence, for its suffixes of length 0 .. max_depth-1 (oldest first): the deepest
        # materialised node on the suffix's path
        self._active: dict[int, deque[Node]] = {}
        # after a removal a node may have count 1 and real children; then every active suffix
        # must be visited (the early stop in append assumes count 1 <=> frontier)
        self._removed = False

    def append(self, sid: int, x: int) -> None:
        seq = self.seqs.get(sid)
        if seq is None:
            seq = self.seqs[sid] = []
            self._active[sid] = deque()
        act = self._active[sid]
        root = self.root
        act.append(root)
        if len(act) > self.max_depth:
            act.popleft()
        end = len(seq)
        seq.append(x)
        root.count += 1
        n = len(act)
        # Newest (shortest) suffix first: once one occurs only here, all longer ones do too
        # and extend implicitly, so the loop stops (arctic visits all; counts are the same).
        for j in range(n):
            i = n - 1 - j
            g = act[i]
            while g.depth < j and g.kids is not None:
                g = g.kids[seq[end - j + g.depth]]
            kids = g.kids
            if kids is None or g.depth < j:
                act[i] = g
                if self._removed:
                    continue
                break
            c = kids.get(x)
            if c is None:
                c = Node(x, j + 1, seq, end + 1)
                if g is not root:  # a new child goes last, with count 1
                    groups = g.groups
                    if groups is None and kids:
                        k1 = g.head
                        # one child so far, and head is that child
                        assert k1 is not None
                        groups = g.groups = {k1.count: [k1]}
                        g.top = k1.count
                    if groups is None:
                        g.head = c
                    else:
                        ones = groups.get(1)
                        if ones is None:
                            groups[1] = [c]
                        else:
                            ones.append(c)
                        if g.top < 1:
                            g.top = 1
                        g.head = groups[g.top][0]
                kids[x] = c
            else:
                if c.kids is None:
                    self._materialise(c, seq, end)
                cnt = c.count
                c.count = cnt + 1
                groups = g.groups
                if groups is not None:
                    _promote(g, groups, c, cnt)
            act[i] = c

    def _materialise(self, c: Node, seq: list[int], end: int) -> None:
        """``c`` is about to be seen a second time: give it the real child its first
        occurrence continues with. If that continuation is the token being appended now (an
        overlap in this sequence), the older suffix, visited after this one, adds it."""
        c.kids = {}
        sf, ef = c.seq, c.end
        if c.depth < self.max_depth and ef < len(sf) and not (sf is seq and ef == end):
            y = sf[ef]
            c.head = c.kids[y] = Node(y, c.depth + 1, sf, ef + 1)

    def remove(self, sid: int) -> None:
        """Drop a sequence: every suffix path's counts go down by one (arctic ``remove``)."""
        seq = self.seqs.pop(sid, None)
        if seq is None:
            return
        del self._active[sid]
        self._removed = True
        root, depth = self.root, self.max_depth
        for start in range(len(seq)):
            root.count -= 1
            node = root
            for idx in range(start, min(len(seq), start + depth)):
                kids = node.kids
                if kids is None:
                    break
                c = kids.get(seq[idx])
                if c is None:
                    break
                if c.count > 1:
                    if node.groups is not None:
                        _demote(node, node.groups, c)
                    else:
                        c.count -= 1
                    node = c
                    continue
                del kids[seq[idx]]  # count 1 -> 0: the whole subtree was this occurrence
                groups = node.groups
                if groups is not None:
                    ones = groups[1]
                    ones.remove(c)
                    if not ones:
                        del groups[1]
                        if node.top == 1:
                            node.top = max(groups, default=0)
                    node.head = groups[node.top][0] if groups else None
                else:
                    node.head = None
                break


def _promote(g: Node, groups: dict[int, list[Node]], c: Node, cnt: int) -> None:
    """``c`` (a child of ``g``, whose ``groups`` these are) went from ``cnt`` to ``cnt + 1``
    (arctic ``_increment_count``: the first of its count moves to the front of the next count,
    any other to its back)."""
    same = groups[cnt]
    first = same[0] is c
    if first:
        del same[0]
    else:
        same.remove(c)
    if not same:
        del groups[cnt]
    up = groups.get(cnt + 1)
    if up is None:
        groups[cnt + 1] = [c]
    elif first:
        up.insert(0, c)
    else:
        up.append(c)
    if cnt + 1 >= g.top:
        g.top = cnt + 1
        g.head = groups[cnt + 1][0]


def _demote(g: Node, groups: dict[int, list[Node]], c: Node) -> None:
    """``c`` (a child of ``g``, whose ``groups`` these are) goes from its count to one less, to
    the front of that count (arctic ``_decrement_count``)."""
    cnt = c.count
    same = groups[cnt]
    same.remove(c)
    if not same:
        del groups[cnt]
    down = groups.get(cnt - 1)
    if down is None:
        groups[cnt - 1] = [c]
    else:
        down.insert(0, c)
    if g.top == cnt and cnt not in groups:
        g.top = cnt - 1
    g.head = groups[g.top][0]
    c.count = cnt - 1
