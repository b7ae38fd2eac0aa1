"""A trained translator's test BLEU under each decoding setting: greedy, beam, with and without no-repeat n-grams.

    python -m benchmarks.translation_decoding saved_models/transformer_small_spa-eng/1 --data-dir DATA
    python -m benchmarks.translation_decoding VERSION --data-dir DATA --settings greedy greedy+nr3 beam4+nr3+ml1.5
    python -m benchmarks.translation_decoding CHECKPOINT.keras --data-dir DATA --split-by source

Loads a version written by `recipes/train_translator.py` (`models.load`), or
a `.keras` checkpoint from its `_training/checkpoints/`, and decodes the test
split it was evaluated on (`split_by` from the version's `metrics.json`, or
`--split-by`). For each setting (`greedy`, `beamN`, either with `+nrK` for
`no_repeat_ngram_size=K` and `+mlA` or `+mlA,B` for `max_length_ratio=A`,
`max_length_offset=B` (default 10)) it prints sacrebleu BLEU (lowercase) and chrF, the
share of translations that repeat a word 3-gram (repetition loops), the share
of output words never seen in the training targets (invented sub-word
strings), and the decoding time; then the translations of a few unfamiliar
sentences (numerals, names, long ones).
"""

import argparse
import json
import pathlib
import re
import time

PROBES = ["It is two o'clock.", "I was born on March 3, 1987.", "Tom met Mary in Liverpool in 2011.",
          "Our flight leaves at 10:45 and arrives at 14:20.", "Zbigniew bought 37 refurbished pumps.",
          "When I was young, my grandmother, who lived in a small village near the mountains, used to tell "
          "me long stories about the war, the hunger and the people she had lost."]


def parse_setting(text):
    match = re.fullmatch(r"(greedy|beam(\d+))(?:\+nr(\d+))?(?:\+ml(\d+(?:\.\d+)?)(?:,(\d+))?)?", text)
    if not match or (match.group(4) and float(match.group(4)) <= 0):
        raise argparse.ArgumentTypeError(f"expected greedy or beamN, then optionally +nrK and +mlA or +mlA,B "
                                         f"(A > 0), e.g. beam4+nr3+ml1.5; got {text!r}")
    beams = int(match.group(2) or 1)
    limit = {} if not match.group(4) else {"max_length_ratio": float(match.group(4)),
                                           "max_length_offset": int(match.group(5) or 10)}
    return text, {"strategy": "beam" if beams > 1 else "greedy", "num_beams": beams,
                  "no_repeat_ngram_size": int(match.group(3) or 0), **limit}


def repeats_a_trigram(text):
    words = text.split()
    grams = list(zip(words, words[1:], words[2:]))
    return len(set(grams)) < len(grams)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("version", type=pathlib.Path, help="a translator version folder or .keras file")
    p.add_argument("--data-dir", default=None, help="the data the version was trained on")
    p.add_argument("--dataset", default=None, help="default: the version's config.json, else spa-eng")
    p.add_argument("--split-by", choices=("pair", "source"), default=None,
                   help="default: the version's metrics.json, else pair")
    p.add_argument("--settings", nargs="+", type=parse_setting,
                   default=[parse_setting(s) for s in ("greedy", "greedy+nr3", "beam4", "beam4+nr3")])
    args = p.parse_args()
    import keras
    import sacrebleu

    from kformer import models
    from kformer.data import translation

    def read(name):
        path = args.version / name
        return json.loads(path.read_text()) if path.is_file() else {}

    model = models.load(args.version)
    split_by = args.split_by or read("metrics.json").get("split_by", "pair")
    dataset = args.dataset or read("config.json").get("dataset", "spa-eng")
    train_sources, train_targets = translation.load_split("train", dataset, args.data_dir, split_by=split_by)
    sources, references = translation.load_split("test", dataset, args.data_dir, split_by=split_by)
    known_words = {w for t in train_targets for w in re.findall(r"\w+", t.lower())}
    seen = set(train_sources)
    unseen = [i for i, s in enumerate(sources) if s not in seen]
    print(f"{args.version}: {model.count_params()} parameters, {keras.backend.backend()}, test split by {split_by}: "
          f"{len(sources)} pairs, {len(unseen)} with an English sentence not in train")
    print("| setting | BLEU | chrF | BLEU unseen sources | repeats a 3-gram | unknown words | seconds |")
    print("|---|---|---|---|---|---|---|")
    probes = {}
    for name, options in args.settings:
        start = time.time()
        hypotheses = model.translate(sources, **options)
        seconds = time.time() - start
        bleu = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
        chrf = sacrebleu.corpus_chrf(hypotheses, [[r.lower() for r in references]]).score
        unseen_bleu = sacrebleu.corpus_bleu([hypotheses[i] for i in unseen], [[references[i] for i in unseen]],
                                            lowercase=True).score if unseen else float("nan")
        loops = sum(map(repeats_a_trigram, hypotheses)) / len(hypotheses)
        words = [w for h in hypotheses for w in re.findall(r"\w+", h.lower())]
        unknown = sum(w not in known_words for w in words) / max(1, len(words))
        print(f"| {name} | {bleu:.2f} | {chrf:.2f} | {unseen_bleu:.2f} | {loops:.2%} | {unknown:.2%} | "
              f"{seconds:.0f} |", flush=True)
        probes[name] = model.translate(PROBES, **options)
    for i, sentence in enumerate(PROBES):
        print(f"\n{sentence}")
        for name, outputs in probes.items():
            print(f"  {name:>12}: {outputs[i]}")


if __name__ == "__main__":
    main()
