"""Decoding settings compared across backends."""

GENERATE_CASES = {
    "greedy": dict(max_length=8, start_token_id=1, end_token_id=2),
    "beam": dict(max_length=8, start_token_id=1, end_token_id=2, strategy="beam", num_beams=3),
    "top_k": dict(max_length=8, start_token_id=1, end_token_id=2, strategy="top_k", k=5, seed=11),
}
