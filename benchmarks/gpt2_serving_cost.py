"""What serving GPT-2 with token ids costs: the client's tokenization against the served request.

    KERAS_BACKEND=tensorflow python benchmarks/gpt2_serving_cost.py

keras-hub's byte-level BPE splits words with tensorflow-text's regex op, which
the stock TF Serving binary lacks, so a GPT-2 SavedModel from kformer takes
`prompt_ids` (the client tokenizes) and returns the completion as text
(detokenized in core ops) and ids. This measures, per one-prompt request:
- the client's tokenization: transformers' `GPT2TokenizerFast` (Rust) and
  kformer's `preprocessor.prompt_ids` (keras-hub, TensorFlow);
- the served greedy request (`serving_default`, 20 new tokens) of a
  GPT-2-shaped model (6 layers, width 384, a byte-level BPE of 8,000 pieces
  learned from the bundled IMDB reviews; random weights: the speed does not
  depend on them), the prompt's first 16 tokens and 36 tokens in all (no end
  token is ever chosen: random weights rarely pick it).
Prompts are the first 8 words of real bundled test reviews. Writes
benchmarks/results/gpt2_serving_cost.csv.
"""

import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kformer import export  # noqa: E402
from kformer.data import imdb  # noqa: E402
from kformer.models.pretrained import from_pretrained  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402

RESULTS = pathlib.Path(__file__).with_name("results") / "gpt2_serving_cost.csv"


def checkpoint(folder, texts, vocabulary_size=8000):
    """A GPT-2-shaped random-weight checkpoint (transformers) with a byte-level BPE learned from `texts`."""
    import json

    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocabulary_size - 1, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.model.save(str(folder))
    tok.add_special_tokens(["<|endoftext|>"])
    (folder / "vocab.json").write_text(json.dumps(tok.get_vocab()), encoding="utf-8")
    size = tok.get_vocab_size()
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=size, n_positions=128, n_embd=384, n_layer=6, n_head=6,
                                     bos_token_id=size - 1, eos_token_id=size - 1)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder, safe_serialization=True)
    return transformers.GPT2TokenizerFast.from_pretrained(folder)


def median_ms(fn, requests, warmup=3):
    for r in requests[:warmup]:
        fn(r)
    times = []
    for r in requests:
        start = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def main():
    texts = imdb.load_split("train", max_examples=2000)[0]
    prompts = [" ".join(t.split()[:8]) for t in imdb.load_split("test", max_examples=40)[0]]
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp) / "checkpoint"
        folder.mkdir()
        fast = checkpoint(folder, texts)
        lm = from_pretrained(folder)
        prompts = [p for p in prompts if 0 not in fast(p)["input_ids"]]  # id 0 ("!") is kformer's padding
        rows = [("client tokenization: transformers GPT2TokenizerFast",
                 median_ms(lambda p: fast(p)["input_ids"], prompts)),
                ("client tokenization: kformer prompt_ids (keras-hub)", median_ms(lm.preprocessor.prompt_ids, prompts))]
        ids = [np.array([fast(p)["input_ids"][:16]], np.int32) for p in prompts]
        path = export.export_for_serving(lm, pathlib.Path(tmp) / "export", max_length=36, warmup_requests=False)
        serve = tf.saved_model.load(str(path)).signatures["serving_default"]
        rows.append(("served greedy request (prompt <= 16 tokens, 36 in all)",
                     median_ms(lambda i: serve(prompt_ids=tf.constant(i)), ids)))
    provenance.write_csv(RESULTS, ["what", "median_ms_per_request"], [(name, f"{ms:.3f}") for name, ms in rows])
    for name, ms in rows:
        print(f"{name:<55} {ms:9.3f} ms")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
