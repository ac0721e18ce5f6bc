"""Incremental maintenance of the shapes users write most (docs/architecture.md, "Incremental maintenance"):
``facts`` and ``joinfacts`` recognize them in the analysed plan (``logfacts`` checks a GROUP BY over a log
table), ``common`` keeps their state in the hot store, ``topn``, ``topnparts``, ``aggbatch``, ``logagg`` and
``joinbatch`` are their micro-batch functions.
Imports nothing of the strategies at package level (``shape`` imports ``facts`` and ``joinfacts``)."""


def batch_function(strategy: str):
    """The micro-batch function factory of an incremental strategy, the same on both data paths (imported
    on use: these modules import the strategies)."""
    if strategy == "topn":
        from materializer.incremental.topn import topn_batch
        from materializer.incremental.topnparts import partitioned_topn_batch

        return lambda ctx: (partitioned_topn_batch if ctx.table.incremental.partition else topn_batch)(ctx)
    if strategy == "agg_log":
        from materializer.incremental.logagg import log_aggregate_batch

        return log_aggregate_batch
    if strategy in ("join_changelog", "join_log"):
        from materializer.incremental.joinbatch import join_batch

        return join_batch
    from materializer.incremental.aggbatch import aggregate_batch

    return aggregate_batch
