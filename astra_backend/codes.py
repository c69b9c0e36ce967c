"""The integer codes the C++ core takes for collectives, algorithms and trace node kinds (kept
apart from trace.py, which needs numpy, so that `rapid net` starts without it)."""

COLLECTIVES = {"all_reduce": 0, "reduce_scatter": 1, "all_gather": 2, "all_to_all": 3, "broadcast": 4}
SEND_RECV = 5
ALGORITHMS = {"ring": 0, "direct": 1, "halving_doubling": 2, "double_binary_tree": 3}
COMPUTE, SEND, RECV, ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, BROADCAST = range(8)
NODE_KINDS = {"compute": COMPUTE, "send": SEND, "recv": RECV, "all_reduce": ALL_REDUCE,
              "reduce_scatter": REDUCE_SCATTER, "all_gather": ALL_GATHER, "all_to_all": ALL_TO_ALL,
              "broadcast": BROADCAST}
