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
strings), the share of sources with digits whose translation has every digit
string unchanged, and the decoding time; then the translations of a few unfamiliar
sentences (numerals, names, long ones). Appends one row per setting to
benchmarks/results/translation_decoding.csv (`--results`), each with the
command, commit, date, machine and backend. `--max-examples N` decodes only the
first N test pairs (a quick look; the figures are not the split's).
"""

import argparse
import json
import pathlib
import re
import time

from benchmarks import provenance
from recipes.train_translator import digit_copies

HEADER = ["version", "split_by", "test_pairs", "setting", "bleu", "chrf", "bleu_unseen_sources",
          "repeats_a_trigram_percent", "unknown_words_percent", "digit_sources", "digits_copied_percent", "seconds"]

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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("version", type=pathlib.Path, help="a translator version folder or .keras file")
    p.add_argument("--data-dir", default=None, help="the data the version was trained on")
    p.add_argument("--dataset", default=None, help="default: the version's config.json, else spa-eng")
    p.add_argument("--split-by", choices=("pair", "source"), default=None,
                   help="default: the version's metrics.json, else pair")
    p.add_argument("--settings", nargs="+", type=parse_setting,
                   default=[parse_setting(s) for s in ("greedy", "greedy+nr3", "beam4", "beam4+nr3")])
    p.add_argument("--max-examples", type=int, default=None, help="the first N test pairs (default: all)")
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("translation_decoding.csv"),
                   help="the CSV the rows are appended to")
    args = p.parse_args(argv)
    if args.max_examples is not None and args.max_examples < 1:
        p.error(f"--max-examples must be >= 1. Received: {args.max_examples}")
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
    sources, references = sources[:args.max_examples], references[:args.max_examples]
    known_words = {w for t in train_targets for w in re.findall(r"\w+", t.lower())}
    seen = set(train_sources)
    unseen = [i for i, s in enumerate(sources) if s not in seen]
    print(f"{args.version}: {model.count_params()} parameters, {keras.backend.backend()}, test split by {split_by}: "
          f"{len(sources)} pairs, {len(unseen)} with an English sentence not in train")
    print("| setting | BLEU | chrF | BLEU unseen sources | repeats a 3-gram | unknown words | digits copied | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    probes, rows = {}, []
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
        copied, digit_sources = digit_copies(sources, hypotheses)  # every digit string of the source, unchanged
        copied = "" if copied is None else f"{100 * copied:.2f}"
        print(f"| {name} | {bleu:.2f} | {chrf:.2f} | {unseen_bleu:.2f} | {loops:.2%} | {unknown:.2%} | "
              f"{copied or '-'}% of {digit_sources} | {seconds:.0f} |", flush=True)
        rows.append((str(args.version), split_by, len(sources), name, f"{bleu:.2f}", f"{chrf:.2f}",
                     f"{unseen_bleu:.2f}", f"{100 * loops:.2f}", f"{100 * unknown:.2f}", digit_sources, copied,
                     f"{seconds:.1f}"))
        probes[name] = model.translate(PROBES, **options)
    provenance.write_csv(args.results, HEADER, rows, backend=keras.backend.backend(), append=True)
    print(f"appended {len(rows)} rows to {args.results}")
    for i, sentence in enumerate(PROBES):
        print(f"\n{sentence}")
        for name, outputs in probes.items():
            print(f"  {name:>12}: {outputs[i]}")


if __name__ == "__main__":
    main()
