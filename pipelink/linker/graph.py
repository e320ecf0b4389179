"""The graph questions the linker asks: an order of the components that respects every edge (ties
kept in pipeline order), or the cycle that makes one impossible; and what lies downstream of each."""
from __future__ import annotations


def dependency_order(names: list[str], edges: list[tuple[str, str, str]]) -> tuple[list[str] | None, list]:
    """`edges` are (from, to, label). Returns (order, []) or (None, the cycle as (from, to, label) edges)."""
    import networkx as nx  # imported here: a cache hit needs no graph

    g = nx.DiGraph()
    rank = {n: i for i, n in enumerate(names)}
    g.add_nodes_from(rank)
    for a, b, label in edges:
        g.add_edge(a, b, label=label)
    try:
        return list(nx.lexicographical_topological_sort(g, key=lambda n: rank[n])), []
    except nx.NetworkXUnfeasible:
        return None, [(a, b, g.edges[a, b]["label"]) for a, b in nx.find_cycle(g)]


def downstream(names: list[str], edges: list[tuple[str, str, str]]) -> dict[str, set[str]]:
    """For each name, every name reachable from it along `edges` ((from, to, label))."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(names)
    g.add_edges_from((a, b) for a, b, _ in edges)
    return {n: nx.descendants(g, n) for n in names}
