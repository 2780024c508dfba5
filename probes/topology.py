"""The NVLink graph of a node: the largest group of GPUs every pair of which NVLink joins
(:attr:`probes.hardware.HardwareProfile.nvlink_domain`)."""

from __future__ import annotations

#: The most calls :func:`largest_clique` makes before it answers with the largest clique found so far: the graphs
#: of real boards (NVSwitch, bridged pairs, DGX-1's cube-mesh) need fewer than a hundred.
CLIQUE_CALLS = 10_000


def largest_clique(pairs: set[tuple[int, int]]) -> int:
    """The size of the largest set of vertices every pair of which is in ``pairs`` (1 without pairs).

    Bron and Kerbosch's algorithm with Tomita's pivot (Tomita, Tanaka and Takahashi 2006, "The worst-case time
    complexity for generating all maximal cliques", Theoretical Computer Science 363(1)), pruned by the size found
    (a branch that cannot beat it is cut) and bounded by :data:`CLIQUE_CALLS`: a graph no board has answers with
    the largest clique found by then, never a hang."""
    neighbours: dict[int, set[int]] = {}
    for a, b in pairs:
        if a != b:
            neighbours.setdefault(a, set()).add(b)
            neighbours.setdefault(b, set()).add(a)
    best, calls = 1 if not neighbours else 2, 0

    def expand(size: int, candidates: set[int], excluded: set[int]) -> None:
        nonlocal best, calls
        calls += 1
        if not candidates and not excluded:
            best = max(best, size)
            return
        if size + len(candidates) <= best or calls > CLIQUE_CALLS:
            return
        pivot = max(candidates | excluded, key=lambda v: len(neighbours[v] & candidates))
        for v in list(candidates - neighbours[pivot]):
            expand(size + 1, candidates & neighbours[v], excluded & neighbours[v])
            candidates = candidates - {v}
            excluded = excluded | {v}

    expand(0, set(neighbours), set())
    return best
