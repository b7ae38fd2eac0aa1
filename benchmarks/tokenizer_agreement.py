"""Token ids of kformer's checkpoint tokenizers against transformers', on 2,000 real reviews.

    KERAS_BACKEND=tensorflow python benchmarks/tokenizer_agreement.py [--reviews 2000]

- BERT: kformer's WordPiece (core TensorFlow ops) with the `bert_uncased` and
  `bert_cased` normalizers against `transformers.BertTokenizer` (do_lower_case
  True / False), on a vocabulary of 8,000 pieces learned from the bundled
  training reviews (with their characters, so few words are [UNK]). Ids in
  process (`WordPieceTokenizer.tokenize`) and in an exported SavedModel's
  graph (the same tokenizer traced by `tf.function` and saved, reloaded).
- GPT-2: kformer's `GPT2CausalLMPreprocessor` (keras-hub's BPE) against
  `transformers.GPT2TokenizerFast`, on a byte-level BPE of 8,000 pieces
  learned from the training reviews. The edge case with a NUL character is
  left out: kformer refuses it (keras-hub's BPE drops NUL and what follows).
Texts: the first `--reviews` bundled test reviews plus edge cases (accents,
CJK, emoji, control characters, `<br />`, a word over 100 characters).
Writes benchmarks/results/tokenizer_agreement.csv.
"""

import argparse
import os
import pathlib
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import transformers  # noqa: E402

from kformer.data import imdb  # noqa: E402
from kformer.data.bpe import GPT2CausalLMPreprocessor  # noqa: E402
from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, WordPieceTokenizer  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from gpt2_serving_cost import checkpoint as gpt2_checkpoint  # noqa: E402
import provenance  # noqa: E402

RESULTS = pathlib.Path(__file__).with_name("results") / "tokenizer_agreement.csv"
EDGE = ["Café déjà vu, naïve façade!<br /><br />Ünïcödé", "İstanbul ΣΑΣ straße ﬁne", "中文字 and 日本語",
        "tab\tnew\nline\u00a0nbsp\u200bzw\u0000nul\ufffd", "Hangul 한국어", "x" * 101 + " ok",
        "e\u0301 combining \ue000private", "soft\u00adhyphen ΟΔΟΣ", "emoji 😀👍🏽 ok", "[SEP][PAD][UNK] [MASK]",
        "„quote“ «q» — – … · • ‘s’ $5.00 -- 50% & #1 @home", "it's we'll I'm they've rock 'n' roll",
        "numbers 1234567 3.14", "  leading and trailing  ", "\u3000wide space"]


def count(got, want):
    return sum(g == w for g, w in zip(got, want))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=2000)
    args = parser.parse_args(argv)
    train = imdb.load_split("train", max_examples=2000)[0]
    texts = imdb.load_split("test", max_examples=args.reviews)[0] + EDGE
    n, rows = len(texts) - len(EDGE), []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        learned = [t for t in WordPieceTokenizer.learn(train, 8000).vocabulary if not t.startswith("[")]
        chars = sorted({c for text in train for c in text if not c.isspace()})
        vocabulary = list(dict.fromkeys(list(BERT_SPECIAL_TOKENS) + chars + ["##" + c for c in chars] + learned))
        (tmp / "vocab.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
        for lowercase in (True, False):
            reference = transformers.BertTokenizer.from_pretrained(tmp, do_lower_case=lowercase)
            want = [reference(t, add_special_tokens=False)["input_ids"] for t in texts]
            ours = WordPieceTokenizer(vocabulary, special_tokens=BERT_SPECIAL_TOKENS,
                                      normalizer="bert_uncased" if lowercase else "bert_cased")
            got = ours.tokenize(texts).to_list()
            module = tf.Module()
            module.tokenizer = ours  # tracks its lookup tables
            module.tokenize = tf.function(lambda t: ours.tokenize(t).to_tensor(-1),
                                          input_signature=[tf.TensorSpec([None], tf.string)])
            tf.saved_model.save(module, str(tmp / f"bert_{lowercase}"))
            served = tf.saved_model.load(str(tmp / f"bert_{lowercase}")).tokenize(tf.constant(texts)).numpy()
            served = [[int(i) for i in row if i != -1] for row in served]
            name = "bert_uncased" if lowercase else "bert_cased"
            rows.append((name, "in process", count(got[:n], want[:n]), n, count(got[n:], want[n:]), len(EDGE)))
            rows.append((name, "exported graph", count(served[:n], want[:n]), n, count(served[n:], want[n:]),
                         len(EDGE)))
        (tmp / "gpt2").mkdir()
        fast = gpt2_checkpoint(tmp / "gpt2", train)
        texts = [t for t in texts if "\x00" not in t]  # refused by kformer: keras-hub's BPE drops NUL and the rest
        edge = len(texts) - n
        want = [fast(t)["input_ids"] for t in texts]
        got = GPT2CausalLMPreprocessor.from_folder(tmp / "gpt2", 32).tokenize(texts).to_list()
        rows.append(("gpt2_bpe", "in process", count(got[:n], want[:n]), n, count(got[n:], want[n:]), edge))
    provenance.write_csv(RESULTS, ["tokenizer", "where", "reviews_identical", "reviews", "edge_cases_identical",
                                   "edge_cases"], rows)
    for row in rows:
        print(f"{row[0]:<13} {row[1]:<15} reviews {row[2]}/{row[3]}  edge cases {row[4]}/{row[5]}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
