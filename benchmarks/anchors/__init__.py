"""Anchor models: the Keras / keras-hub examples kformer's recipes are judged against.

Each module rebuilds one published example at its published sizes (from the
example's text, in Keras layers; keras-hub layers where the example uses
them) and trains it on arrays the caller passes, so that
`benchmarks.quality_vs_anchor` can run it beside the kformer recipe on the
same files. Where the example must differ to run on our splits (test texts
kept out of pretraining, grey-scale digits not flipped), the module says so.
"""
