"""Generation: the decoding protocol a task implements, the options it checks, and the search that runs them.

`protocol` is what a generative task implements (`GenerativeTask`: `prefill`,
`call_with_cache`); `options` checks decoding settings; `search` is the loop
(greedy, beam search, top-k and top-p sampling) behind `Translator.generate`,
`CausalLM.generate` and the SavedModel export; `batching` pads batches to the
few shapes XLA compiles.
"""

from kformer.generation.protocol import GenerativeTask
from kformer.generation.search import decode_function, generate

__all__ = ["GenerativeTask", "decode_function", "generate"]
