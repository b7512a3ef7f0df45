"""Named example graphs the tests share, as GraphFrames' ``examples/graphs.py``: triples ``(h, r, t)`` of
int ids (unless said otherwise), each with what the tests worked out by hand on it."""

# connected components: a path, a star whose centre is not its minimum, and a component with
# parallel triples both ways, self-loops and ids in no triple (COMPONENTS_VERTICES gives them)
COMPONENTS = {
    "path": [(3, 0, 2), (1, 1, 2), (3, 0, 4)],  # 1 - 2 - 3 - 4 in mixed directions
    "star": [(15, 0, 19), (12, 0, 15), (15, 1, 11), (15, 0, 17)],  # centre 15 is not the minimum
    # parallel triples, both directions, several relations; 27 only has self-loops, 30 and 31 no triple at all
    "two": [(21, 0, 22), (22, 1, 21), (21, 0, 22), (24, 0, 23), (25, 2, 24), (27, 0, 27), (27, 1, 27), (23, 3, 23)],
}
COMPONENTS_VERTICES = [30, 22, 31, 27]

# rule mining (AMIE's metrics worked by hand): relation name -> (head, tail) pairs
SOCIAL = {
    "likes": [(1, 2), (1, 3), (4, 5)],
    "knows": [(1, 2), (1, 6), (4, 5), (7, 5), (8, 2)],
    "bornIn": [(1, 10), (2, 10), (3, 11)],
    "livesIn": [(1, 10), (2, 12), (5, 10), (6, 11)],
    "parent": [(21, 22), (22, 23), (22, 24), (25, 26)],
    "grandparent": [(21, 23), (21, 29)],
}

# k-hop balls: a path 0-1-2-3 with a branch 1-4, an edge 5-1 into it, a self-loop on 3, a detached edge 6-7
KHOP = [(0, 0, 1), (1, 1, 2), (2, 0, 3), (1, 2, 4), (5, 0, 1), (3, 0, 3), (6, 1, 7)]

# PROBE popularity: two relations, entity 2 in four triples, 3 only as a head
POPULARITY = [(0, 0, 1), (0, 0, 2), (1, 1, 2), (2, 1, 2), (3, 0, 0)]

# a star in relation 2: hub 10 and leaves 11..15 (degrees 5 and 1), no triangle
STAR_FIVE = [(10, 2, leaf) for leaf in range(11, 16)]

# a star of five leaves around 0, and a tail 5-6-7 on its last leaf
STAR_WITH_TAIL = [(0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 4), (0, 0, 5), (5, 1, 6), (6, 1, 7)]
