"""Decoding settings compared across backends ([START] = 5 and [END] = 6, as in the test tokenizer)."""

from kformer.data.wordpiece import SPECIAL_TOKENS

# A 40-token vocabulary (the small translator's size): the special tokens, then words.
VOCABULARY = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(40 - len(SPECIAL_TOKENS))]
TEXTS = ["w1 w2 w3", "w7 w7", ""]
OPTIONS = dict(max_length=8, start_token_id=5, end_token_id=6)
GENERATE_CASES = {
    "greedy": OPTIONS,
    "beam": dict(OPTIONS, strategy="beam", num_beams=3),
    "top_k": dict(OPTIONS, strategy="top_k", k=5, seed=11),
}
