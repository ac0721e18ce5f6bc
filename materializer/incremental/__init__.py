"""Incremental maintenance of the shapes users write most over a primary-key input (docs/architecture.md,
"Incremental maintenance"): ``facts`` recognizes them in the analysed plan, ``state`` keeps their state in
the hot store, ``topn`` and ``aggregate`` are their micro-batch functions. Imports nothing of the strategies
at package level (``shape`` imports ``facts``)."""


def batch_function(strategy: str):
    """The micro-batch function factory of an incremental strategy, the same on both data paths (imported
    on use: these modules import the strategies)."""
    if strategy == "topn":
        from materializer.incremental.topn import topn_batch

        return topn_batch
    from materializer.incremental.aggbatch import aggregate_batch

    return aggregate_batch
