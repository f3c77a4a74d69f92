"""One owner of group shapes (train/placement.py ``Groups``): the collective model's ranks per node and the
topology traffic pass's node footprint come from the same (size, stride, pattern), expert-TP included.

Regression: the traffic pass once placed the EP group with stride ``tp cp`` and expert-DP as ``dp cp / ep``
while placement used ``etp`` and ``tp cp dp / (etp ep)``; for tp2 dp256 ep8 etp1 on ref-1k-h100 the EP group
was 2 nodes in one and 1 node in the other, expert-DP 32 vs 64."""

from __future__ import annotations

import itertools

import pytest

from clustertwin import catalog
from clustertwin.train.layout import Layouts
from clustertwin.train.placement import Groups, groups
from clustertwin.train.topology_comm import group_traffic, node_shape

CLUSTER = catalog.get("cluster", "ref-1k-h100")


def test_issue_case_ep_in_one_node() -> None:
    lay = Layouts(2, 1, 256, 1, 8, 1, 1, 0, 1, 1, etp=1)
    g = groups(lay, 8)
    assert (g.ep.size, g.ep.stride, g.ep.ranks_per_node) == (8, 1, 8)
    assert (g.edp.size, g.edp.stride) == (64, 8)
    frac, hops = group_traffic(CLUSTER, lay, 8)
    assert hops["ep"] == 0 and frac["ep"] == 1.0  # one node: no switch on the way
    assert node_shape(*g.shapes()["ep"][:2], 8) == (1, 1)


LAYOUTS = [(tp, cp, dp, ep, etp) for tp, cp, dp, ep, etp in itertools.product((1, 2, 4, 8), (1, 2), (8, 32, 64),
                                                                                (1, 4, 8, 16), (0, 1, 2))
           if (tp * cp * dp) % (max(etp, 1) * ep) == 0 and (etp == 0 or (tp * cp * dp) % (etp * ep) == 0)]


@pytest.mark.parametrize("tp,cp,dp,ep,etp", LAYOUTS[::7])
def test_footprint_matches_ranks_per_node(tp: int, cp: int, dp: int, ep: int, etp: int) -> None:
    """For every kind but the pipeline (whose hop is a pair of stages), the traffic pass's node footprint holds
    exactly the group's members at the group's ranks per node."""
    lay = Layouts(tp, 1, dp, cp, ep, 1, 1, 0, 1, int(tp > 1), etp=etp)
    g = groups(lay, 8)
    for kind, (size, stride, _pattern) in g.shapes().items():
        if kind == "pp":
            continue
        grp = getattr(g, kind)
        m, _s = node_shape(int(size), int(stride), 8)
        assert m * int(grp.ranks_per_node) >= int(grp.size), (kind, m, grp)
        assert m == -(-int(grp.size) // int(grp.ranks_per_node)), (kind, m, grp)


def test_kinds_cover_every_group() -> None:
    assert set(Groups.KINDS) == {f for f in Groups.__dataclass_fields__}
