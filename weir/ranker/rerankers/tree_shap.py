"""TreeSHAP contributions of a LightGBM booster (:class:`TreeShap`): the same values as LightGBM's ``pred_contrib``
(path-dependent TreeSHAP, Lundberg et al. 2020), from tables made once per model, several times faster per row.

LightGBM walks every tree's paths for every row (``O(leaves x depth^2)`` a tree), about 55 microseconds a SciFact
candidate for the shipped ``ltr`` (140 trees of 7 leaves): half of what ``explain`` added to a `hybrid>>ltr` call
once the rest of the call had become fast. The values it computes are, per leaf, the Shapley values of a product game:
with ``P`` the distinct features on the leaf's path, ``z_j`` the share of the training rows that took the path's
branches on feature ``j`` (its data counts) and ``o_j`` whether the row takes them, the leaf adds ``v * prod_j
(o_j if j in S else z_j)`` to the value of a coalition ``S``, so feature ``i`` of ``P`` gets ``v * (o_i - z_i) *
sum over S in P - {i} of |S|! (|P| - |S| - 1)! / |P|! * prod_{j in S} o_j * prod_{j not in S, j != i} z_j``. The
``o`` are 0 or 1, so that value depends on the row only through which features of the path it satisfies: a table
of ``2^|P| x |P|`` numbers per leaf (the "fast TreeSHAP v2" idea of Yang, 2021) made at the first explained call, and
a row then costs one decision per node and a table read per leaf and feature. No library exposes this for LightGBM
without a new dependency (``fasttreeshap`` is a fork of ``shap``), so it is written here; it is tested equal to
``pred_contrib`` (to 1e-9) on real features with missing values. Numerical splits only (weir's features are); a
model whose paths are deeper than :data:`MAX_PATH_FEATURES` distinct features keeps LightGBM's own.
"""

from __future__ import annotations

import math

import numba
import numpy as np

MISSING = {"None": 0, "Zero": 1, "NaN": 2}  # LightGBM's missing types, as the kernel reads them
ZERO = 1e-35  # LightGBM's kZeroThreshold
# the most distinct features a leaf's path may have: its table holds p x 2^p numbers and takes p^2 x 3^p steps to
# make (8: 2,048 and 420k); a model with deeper paths is explained by LightGBM's own pred_contrib (`of`)
MAX_PATH_FEATURES = 8


class TreeShap:
    """The tables of one booster (its trees up to ``num_iteration``, LightGBM's meaning) and their use."""

    def __init__(self, nodes: list[tuple], leaves: list[tuple], bias: float, n_features: int):
        """``nodes``: (feature, threshold, default left, missing type) each; ``leaves``: (value, its conditions
        [(node, goes left, distinct feature slot)], its path's distinct features, their shares z) each."""
        self.n_features, self.bias = n_features, bias
        self.node_feature = np.asarray([n[0] for n in nodes], dtype=np.int64)
        self.node_threshold = np.asarray([n[1] for n in nodes], dtype=np.float64)
        self.node_default_left = np.asarray([n[2] for n in nodes], dtype=np.bool_)
        self.node_missing = np.asarray([n[3] for n in nodes], dtype=np.int64)
        self.cond_offsets = np.cumsum([0] + [len(leaf[1]) for leaf in leaves])
        conditions = [c for leaf in leaves for c in leaf[1]]
        self.cond_node = np.asarray([c[0] for c in conditions], dtype=np.int64)
        self.cond_left = np.asarray([c[1] for c in conditions], dtype=np.bool_)
        self.cond_slot = np.asarray([c[2] for c in conditions], dtype=np.int64)
        self.feat_offsets = np.cumsum([0] + [len(leaf[2]) for leaf in leaves])
        self.leaf_features = np.asarray([f for leaf in leaves for f in leaf[2]], dtype=np.int64)
        self.table_offsets = np.cumsum([0] + [len(leaf[2]) << len(leaf[2]) for leaf in leaves])
        self.tables = _tables(np.asarray([leaf[0] for leaf in leaves], dtype=np.float64), self.feat_offsets,
                              np.asarray([z for leaf in leaves for z in leaf[3]], dtype=np.float64),
                              self.table_offsets, _weights(max((len(leaf[2]) for leaf in leaves), default=0)))

    @classmethod
    def of(cls, booster, num_iteration: int | None = None) -> TreeShap | None:
        """The tables of ``booster``'s trees up to ``num_iteration`` (LightGBM's meaning); None when a path has more
        than :data:`MAX_PATH_FEATURES` distinct features."""
        nodes: list[tuple] = []
        leaves: list[tuple] = []
        bias = 0.0
        for tree in booster.dump_model(num_iteration=num_iteration)["tree_info"]:
            bias += _walk(tree["tree_structure"], nodes, leaves)
        if any(len(leaf[2]) > MAX_PATH_FEATURES for leaf in leaves):
            return None
        return cls(nodes, leaves, bias, booster.num_feature())

    def contributions(self, X: np.ndarray) -> np.ndarray:
        """Rows ``X`` (the booster's features) -> a column per feature, then the expected value (``pred_contrib``)."""
        out = np.zeros((len(X), self.n_features + 1))
        _contributions(np.ascontiguousarray(X, dtype=np.float64), self.node_feature, self.node_threshold,
                       self.node_default_left, self.node_missing, self.cond_offsets, self.cond_node, self.cond_left, self.cond_slot, self.feat_offsets,
                       self.leaf_features, self.table_offsets, self.tables, out)
        out[:, -1] = self.bias
        return out


def _walk(node: dict, nodes: list, leaves: list, path: tuple = ()) -> float:
    """Record the subtree's nodes and leaves (``path``: its (node, goes left, feature, share of the parent's rows)
    conditions from the root); returns its leaves' values weighted by their share of the tree's rows."""
    if "leaf_value" in node:
        features: list[int] = []
        z: list[float] = []
        conditions = []
        for at, left, feature, share in path:
            if feature not in features:
                features.append(feature)
                z.append(1.0)
            slot = features.index(feature)
            z[slot] *= share
            conditions.append((at, left, slot))
        leaves.append((float(node["leaf_value"]), conditions, features, z))
        return float(node["leaf_value"]) * math.prod(share for *_, share in path)
    if node["decision_type"] != "<=":
        raise ValueError(f"TreeShap reads numerical splits only, not {node['decision_type']!r}")
    at = len(nodes)
    nodes.append((int(node["split_feature"]), float(node["threshold"]), bool(node["default_left"]),
                  MISSING[node["missing_type"]]))
    count = node["internal_count"]
    total = 0.0
    for child, left in ((node["left_child"], True), (node["right_child"], False)):
        share = (child.get("internal_count", child.get("leaf_count", 0))) / count if count else 0.0
        total += _walk(child, nodes, leaves, path + ((at, left, int(node["split_feature"]), share),))
    return total


def _weights(p_max: int) -> np.ndarray:
    """w[p, s] = s! (p - s - 1)! / p!, the Shapley weight of a coalition of s of p players."""
    w = np.zeros((p_max + 1, max(p_max, 1)))
    for p in range(1, p_max + 1):
        for s in range(p):
            w[p, s] = math.factorial(s) * math.factorial(p - s - 1) / math.factorial(p)
    return w


@numba.njit(cache=True)
def _tables(values, feat_offsets, z, table_offsets, w):
    """Per leaf, per mask of the path's features the row satisfies, each feature's contribution (module docstring)."""
    tables = np.zeros(table_offsets[-1])
    for leaf in range(len(values)):
        a, p = feat_offsets[leaf], feat_offsets[leaf + 1] - feat_offsets[leaf]
        for mask in range(1 << p):
            for i in range(p):
                rest = mask & ~(1 << i)
                total, sub = 0.0, rest
                while True:  # every S within the satisfied features other than i
                    prod, size = 1.0, 0
                    for j in range(p):
                        if (sub >> j) & 1:
                            size += 1
                        elif j != i:
                            prod *= z[a + j]
                    total += w[p, size] * prod
                    if sub == 0:
                        break
                    sub = (sub - 1) & rest
                tables[table_offsets[leaf] + mask * p + i] = values[leaf] * (((mask >> i) & 1) - z[a + i]) * total
    return tables


@numba.njit(nogil=True, cache=True)
def _contributions(X, node_feature, node_threshold, node_default_left, node_missing, cond_offsets, cond_node,
                   cond_left, cond_slot, feat_offsets, leaf_features, table_offsets, tables, out):
    goes_left = np.zeros(len(node_feature), dtype=np.bool_)
    for r in range(len(X)):
        for n in range(len(node_feature)):  # LightGBM's NumericalDecision at every node
            x = X[r, node_feature[n]]
            if np.isnan(x) and node_missing[n] != 2:
                x = 0.0
            if (node_missing[n] == 1 and abs(x) <= ZERO) or (node_missing[n] == 2 and np.isnan(x)):
                goes_left[n] = node_default_left[n]
            else:
                goes_left[n] = x <= node_threshold[n]
        for leaf in range(len(feat_offsets) - 1):
            a, p = feat_offsets[leaf], feat_offsets[leaf + 1] - feat_offsets[leaf]
            if p == 0:
                continue
            mask = (1 << p) - 1
            for c in range(cond_offsets[leaf], cond_offsets[leaf + 1]):
                if goes_left[cond_node[c]] != cond_left[c]:
                    mask &= ~(1 << cond_slot[c])
            base = table_offsets[leaf] + mask * p
            for i in range(p):
                out[r, leaf_features[a + i]] += tables[base + i]
