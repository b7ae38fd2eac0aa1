"""Generation: one `GenerationConfig`, sampler objects, the protocol a task implements, and the search.

`config` holds every decoding setting (`GenerationConfig`, checked once);
`samplers` choose the next token (`GreedySampler`, `BeamSampler`,
`TopKSampler`, `TopPSampler`, or your own `Sampler`); `protocol` is what a
generative task implements (`GenerativeTask`: `prefill`, `call_with_cache`);
`search` is the loop behind `Translator.generate`, `CausalLM.generate` and
the SavedModel export; `streaming` hands each step's tokens to Python;
`batching` pads batches to the few shapes XLA compiles.
"""

from kformer.generation.config import GenerationConfig
from kformer.generation.protocol import GenerativeTask
from kformer.generation.samplers import BeamSampler, GreedySampler, Sampler, TopKSampler, TopPSampler
from kformer.generation.search import decode_function, generate

__all__ = ["BeamSampler", "GenerationConfig", "GenerativeTask", "GreedySampler", "Sampler", "TopKSampler",
           "TopPSampler", "decode_function", "generate"]
