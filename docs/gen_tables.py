"""The tables of docs/ that come from files: results under benchmarks/results/, presets from the registry.

    python docs/gen_tables.py            # rewrite every generated block of docs/*.md from the files
    python docs/gen_tables.py --check    # exit 1, naming each page and table that differs from its files

A generated block sits between `<!-- table: NAME [ARG] -->` and `<!-- /table -->`; NAME is a key of
`TABLES`. A figure on the Performance, Results or Decisions page lives in one CSV file, written by the
benchmark or quality script that measured it (with command, commit, date, machine and backend), and
reaches the page only through this script. Preset tables (`presets BUILDER`) are filled when the site
builds (`docs/hooks.py`), since the registry grows with the code, and are left empty in the files.
"""

import csv
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w.]+)(?: (?P<arg>[\w.-]+))? -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)
PROVENANCE = ("command", "commit", "date", "machine", "backend")


def read(name):
    """Rows of `benchmarks/results/<name>` as dicts; every row must carry the provenance columns."""
    path = RESULTS / name
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in PROVENANCE if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{path} lacks the provenance columns {missing}; every results file needs {PROVENANCE}.")
    return rows


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def measured(row):
    return f"{row['date']}, `{row['commit']}`, {row['machine']}, {row['backend']}"


def recipes(status):
    """Recipe results of one status (`default`: the current defaults; `option`: flags measured)."""
    rows = [r for r in read("recipes.csv") if r["status"] == status]
    if not rows:
        raise ValueError(f"benchmarks/results/recipes.csv has no row with status {status!r}.")
    return table(["recipe", "run", "metric", "value", "target", "wall time", "data", "measured", "command"],
                 [(r["recipe"], r["run"], r["metric"], f"**{r['value']}**", r["target"] or "-", r["wall"],
                   r["data"], measured(r), f"`{r['command']}`") for r in rows])


def ood(_=None):
    """Each recipe's test figure beside its out-of-distribution figures (`recipes.csv` rows of status `ood`;
    a metric starting with `ood: ` is out of distribution, the others are the run's own test split)."""
    runs = {}
    for r in read("recipes.csv"):
        if r["status"] == "ood":
            runs.setdefault((r["recipe"], r["run"], r["command"]), []).append(r)
    if not runs:
        raise ValueError("benchmarks/results/recipes.csv has no row with status 'ood'.")

    def figures(rows):
        return "; ".join(f"{r['metric'].removeprefix('ood: ')} **{r['value']}**"
                         + (f" (target {r['target']})" if r["target"] else "") for r in rows)

    return table(["recipe", "run", "in distribution", "out of distribution", "data", "measured", "command"],
                 [(recipe, run, figures([r for r in rows if not r["metric"].startswith("ood: ")]),
                   figures([r for r in rows if r["metric"].startswith("ood: ")]), rows[0]["data"],
                   measured(rows[0]), f"`{command}`") for (recipe, run, command), rows in runs.items()])


def moe(_=None):
    """The mixture-of-experts language model beside the dense one: the newest row of each model in
    `moe_vs_dense.csv` (earlier runs stay in the file), with, from `moe_vs_dense_curve.csv`, each model's
    validation perplexity at the last step count both models of that run were scored at."""
    rows = list({r["model"]: r for r in read("moe_vs_dense.csv")}.values())
    curves = {}
    for r in read("moe_vs_dense_curve.csv"):
        curves.setdefault((r["command"], r["commit"], r["date"]), {}).setdefault(r["model"], {})[
            int(r["train_steps"])] = r["validation_perplexity"]

    def equal_steps(row):
        run = curves.get((row["command"], row["commit"], row["date"]), {})
        if row["model"] not in run or len(run) < 2:
            return "-"
        step = max(set.intersection(*(set(points) for points in run.values())), default=None)
        return f"{run[row['model']][step]} (step {step})" if step else "-"

    return table(["model", "wall budget s", "steps", "train tokens/s", "validation perplexity",
                  "at equal steps", "parameters", "used per token", "balancing loss", "dropped", "measured",
                  "command"],
                 [(r["model"], r["budget_s"] or "-", r["train_steps"], r["train_tokens_per_s"],
                   f"**{r['validation_perplexity']}**" if r["validation_perplexity"] else "- (speed only)",
                   equal_steps(r), r["params"], r["active_params_per_token"],
                   r["moe_balancing_loss"] or "-", r["moe_dropped_fraction"] or "-", measured(r),
                   f"`{r['command']}`") for r in rows])


# quality_vs_anchor.csv's score keys -> (label, scale) as the anchor tables show them
SCORE_LABELS = {"test_accuracy": ("test accuracy (%)", 100), "test_top1": ("test top-1 (%)", 100),
                "test_bleu": ("BLEU", 1), "test_chrf": ("chrF", 1),
                "test_digit_error_rate": ("test digit error rate (%)", 100),
                "test_utterance_accuracy": ("test utterance accuracy (%)", 100)}


def anchors(task):
    """kformer beside the example it is judged against, for one task: the rows of `anchors.csv` (transcribed
    from earlier pages) and those `benchmarks/quality_vs_anchor.py` wrote to `quality_vs_anchor.csv`."""
    rows = [r for r in read("anchors.csv") if r["task"] == task]
    for r in read("quality_vs_anchor.csv"):
        if r["task"] == task and r["metric"] in SCORE_LABELS:
            label, scale = SCORE_LABELS[r["metric"]]
            rows.append({**r, "metric": label, "value": f"{float(r['value']) * scale:.2f}"})
    if not rows:
        raise ValueError(f"benchmarks/results/anchors.csv and quality_vs_anchor.csv have no row for task {task!r}.")
    return table(["model", "epochs", "`fit` s", "wall s", "metric", "value", "measured"],
                 [(r["model"], r["epochs"] or "-", r["fit_s"] or "-", r["wall_s"] or "-", r["metric"], r["value"],
                   measured(r)) for r in rows]) + f"\n`{rows[0]['command']}`\n"


def decision(key):
    """What was measured for one entry of docs/decisions.md (`decisions.csv`)."""
    rows = [r for r in read("decisions.csv") if r["decision"] == key]
    if not rows:
        raise ValueError(f"benchmarks/results/decisions.csv has no row for decision {key!r}.")
    return table(["measured", "result", "backend", "machine", "date", "command"],
                 [(r["what"], f"**{r['measured']}**", r["backend"], r["machine"], f"{r['date']} (`{r['commit']}`)",
                   f"`{r['command']}`") for r in rows])


def decisions(_=None):
    """Every row of `decisions.csv`, for the Performance page."""
    return table(["decision", "measured", "result", "backend", "date"],
                 [(f"[{r['decision']}](decisions.md#{r['decision'].replace('_', '-')})", r["what"],
                   f"**{r['measured']}**", r["backend"], f"{r['date']} (`{r['commit']}`)")
                  for r in read("decisions.csv")])


def csv_file(name):
    """A whole results file as a table: its provenance in a line below when every row shares it (one run),
    else folded into two columns."""
    rows = read(name)
    own = [c for c in rows[0] if c not in PROVENANCE]
    shared = {(measured(r), r["command"]) for r in rows}
    if len(shared) == 1:
        (where, command), = shared
        return table(own, [tuple(r[c] for c in own) for r in rows]) + f"\n<sup>{where}; `{command}`.</sup>\n"
    return table([*own, "measured", "command"],
                 [(*(r[c] for c in own), measured(r), f"`{r['command']}`") for r in rows])


def backends(name):
    """A results file's newest run over the backends (one command with `--backends`): one row per backend and
    setting, the backend first; the date, commit, machine and command (without its `KERAS_BACKEND=`) below."""
    rows = read(name)
    newest = [r for r in rows if (r["commit"], r["date"]) == (rows[-1]["commit"], rows[-1]["date"])]
    own = [c for c in newest[0] if c not in PROVENANCE]
    body = table(["backend", *own], [(r["backend"], *(r[c] for c in own)) for r in newest])
    commands = sorted({r["command"].split(" ", 1)[1] if r["command"].startswith("KERAS_BACKEND=") else r["command"]
                       for r in newest})
    first = newest[0]
    return body + (f"\n<sup>{first['date']}, `{first['commit']}`, {first['machine']}; "
                   f"{', '.join(f'`{c}`' for c in commands)}.</sup>\n")


def marian(_=None):
    """`marian_decode.csv`'s newest run: kformer's decoding seconds beside transformers', per backend, batch size
    and strategy, the ratio in bold (above 1: kformer faster); where and how it ran below the table."""
    rows = read("marian_decode.csv")
    newest = [r for r in rows if r["commit"] == rows[-1]["commit"]]
    body = table(["backend", "batch", "strategy", "kformer s", "transformers s", "ratio"],
                 [(r["backend"], r["batch"], r["strategy"], r["kformer_seconds"], r["transformers_seconds"],
                   f"**{r['ratio']}x**") for r in newest])
    commands = sorted({f"`{r['command']}`" for r in newest})
    return body + (f"\n<sup>{newest[0]['size']} shape, {newest[0]['new_tokens']} new tokens, median of "
                   f"{newest[0]['repeats']} calls; {newest[0]['date']}, `{newest[0]['commit']}`, "
                   f"{newest[0]['machine']}; {', '.join(commands)}.</sup>\n")


def whisper(_=None):
    """`whisper_decode.csv`'s newest run: kformer's transcription seconds beside transformers', per backend and
    number of recordings, the ratio in bold (above 1: kformer faster); where and how it ran below the table."""
    rows = read("whisper_decode.csv")
    newest = [r for r in rows if r["commit"] == rows[-1]["commit"]]
    body = table(["backend", "recordings", "kformer s", "transformers s", "ratio"],
                 [(r["backend"], r["batch"], r["kformer_seconds"], r["transformers_seconds"], f"**{r['ratio']}x**")
                  for r in newest])
    commands = sorted({f"`{r['command']}`" for r in newest})
    first = newest[0]
    return body + (f"\n<sup>{first['size']} shape, recordings of {first['seconds_of_audio']} s, {first['new_tokens']} "
                   f"new tokens, median of {first['repeats']} calls; {first['date']}, `{first['commit']}`, "
                   f"{first['machine']}; {', '.join(commands)}.</sup>\n")


def decode(_=None):
    """`decode_speed.csv`'s newest run: kformer's greedy decoding (`generate`), its plain-matrix and readable
    steps, and keras-hub, tokens a second per family, backend and batch size; the ratios that set
    `kernels.decoding.PAYS` (plain / readable) and kformer / keras-hub in bold."""
    rows = read("decode_speed.csv")
    newest = [r for r in rows if r["commit"] == rows[-1]["commit"] and r["tokens_per_s"]]
    speed = {(r["family"], r["backend"], r["batch"], r["impl"]): float(r["tokens_per_s"]) for r in newest}
    cells = sorted({k[:3] for k in speed}, key=lambda k: (k[0] != "translator", BACKENDS.index(k[1]), int(k[2])))

    def get(cell, impl):
        return speed.get((*cell, impl))

    def ratio(a, b):
        return f"**{a / b:.2f}x**" if a and b else "-"

    body = table(["family", "backend", "batch", "kformer tok/s", "plain step", "readable step", "keras-hub",
                  "plain / readable", "kformer / keras-hub"],
                 [(*cell, *(f"{get(cell, i):.0f}" if get(cell, i) else "-" for i in
                            ("kformer_cache", "kformer_plain", "kformer_readable", "keras_hub")),
                   ratio(get(cell, "kformer_plain"), get(cell, "kformer_readable")),
                   ratio(get(cell, "kformer_cache"), get(cell, "keras_hub"))) for cell in cells])
    first = newest[0]
    commands = sorted({re.sub(r"--family \S+", "--family FAMILY", re.sub(r"^KERAS_BACKEND=\S+ ", "", r["command"]))
                       for r in newest})
    return body + (f"\n<sup>{first['new_tokens']} new tokens, median of {first['repeats']} calls; {first['date']}, "
                   f"`{first['commit']}`, {first['machine']}; each backend and family: "
                   f"{', '.join(f'`{c}`' for c in commands)}.</sup>\n")


BACKENDS = ("tensorflow", "jax", "torch")
TABLES = {"recipes": recipes, "decode": decode, "ood": ood, "moe": moe, "anchors": anchors, "decision": decision,
          "decisions": decisions, "csv": csv_file, "backends": backends, "marian": marian,
          "whisper": whisper}


def render(name, arg):
    if name == "presets":
        return ""  # filled at build time from the registry (docs/hooks.py)
    if name not in TABLES:
        raise ValueError(f"Unknown generated table {name!r}; known: {', '.join(sorted(TABLES))}, presets.")
    return TABLES[name](arg)


def regenerate(text):
    """`text` with every generated block rendered anew."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name"), m.group("arg")) + m.group(5), text)


def pages():
    return sorted(DOCS.rglob("*.md"))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = regenerate(text)
        if new != text:
            stale.append(page.relative_to(ROOT))
            if not check:
                page.write_text(new, encoding="utf-8")
    if check and stale:
        print("Pages that differ from benchmarks/results/ (run `python docs/gen_tables.py`):",
              *stale, sep="\n  ", file=sys.stderr)
        return 1
    print(("stale: " if check else "rewrote: ") + (", ".join(map(str, stale)) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
