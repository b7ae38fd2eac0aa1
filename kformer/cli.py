"""`kformer`: the command line (installed as a console script).

    kformer list [--params]                   the presets (and parameter counts)
    kformer train imdb --epochs 1             a recipe (source checkout: recipes/ and data/)
    kformer predict saved_models/imdb_bigram/1 "A fine film."
    kformer generate saved_models/gpt_tiny/1 "The movie was"   the text as it comes
    kformer demo saved_models/imdb_bigram/1   try it in the browser (pip install "kformer[demo]")
    kformer export model.keras --output-dir exports/imdb
    kformer export model.keras --output-dir exports/imdb --quantize int8   int8 weights in the SavedModel
    kformer check-serving exports/imdb/1      would a stock TF Serving load it? (exit 1 if not)

`--help` works at every level; bad flags exit 2 naming the flag. TensorFlow's
and absl's start-up logging is off (`-v` or KFORMER_VERBOSE=1 shows it), and
`--help`, `--version` and `list` load no backend.
"""

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading

from kformer import __version__, runtime

# The recipes `kformer train` runs: name -> script under recipes/ (`python -m recipes.<script>`). The
# library never imports recipes/: they are scripts of the source checkout, run in their own process.
RECIPES = {"imdb": "train_imdb", "translator": "train_translator", "bert": "pretrain_mini_bert",
           "vit": "train_vit", "gpt": "train_gpt", "speech": "train_speech"}
COMMANDS = ("list", "train", "predict", "generate", "demo", "export", "check-serving")
QUANTIZE_MODES = ("int8", "int4", "float8")  # Keras's modes that need no calibration data
SAMPLERS = ("greedy", "top_k", "top_p")  # `kformer generate --sampler` (streamed: one token a step, no beams)
_VERBOSE_FLAGS = ("-v", "--verbose")


def main(argv=None):
    """Run the command in `argv` (default: `sys.argv[1:]`); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = False
    while argv[:1] and argv[0] in _VERBOSE_FLAGS:  # before the command (so also before `train`'s own flags)
        verbose, argv = True, argv[1:]
    if verbose:
        os.environ[runtime.VERBOSE_ENV] = "1"  # and for the recipe `train` starts
    runtime.quiet_startup()  # before anything loads TensorFlow
    parser = _parser()
    if argv[:1] == ["train"]:  # the recipe parses its own flags (and --help)
        return _train(parser, argv[1:])
    args = parser.parse_args(argv)
    return args.run(parser, args)


def _version():
    """`kformer --version`: kformer's version, with keras's and Python's (read without importing keras)."""
    from importlib import metadata

    try:
        keras = f"keras {metadata.version('keras')}, "
    except metadata.PackageNotFoundError:
        keras = ""
    return f"kformer {__version__} ({keras}Python {sys.version.split()[0]})"


def _parser():
    p = argparse.ArgumentParser(prog="kformer", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--version", action="version", version=_version())
    p.add_argument("-v", "--verbose", action="store_true",
                   help=f"show TensorFlow's, XLA's and absl's start-up logging (also: {runtime.VERBOSE_ENV}=1)")
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    listing = sub.add_parser("list", help="the presets, their builders and sizes")
    listing.add_argument("--params", action="store_true", help="also build each preset and count its parameters")
    listing.set_defaults(run=_list)
    sub.add_parser("train", help=f"run a recipe: {', '.join(RECIPES)} (then its flags; try --help)")
    predict = sub.add_parser("predict", help="load a version folder or .keras file and answer")
    predict.add_argument("path", help="a recipe's version folder or a .keras file")
    predict.add_argument("inputs", nargs="+",
                         help="texts, or image files for an image classifier, or WAV files for a speech recognizer")
    predict.add_argument("--max-length", type=_positive_int, default=None,
                         help="translation / generation length (an integer >= 1)")
    predict.set_defaults(run=_predict)
    generate = sub.add_parser("generate", help="continue a prompt (language model) or translate a text, "
                              "writing the text as it is generated")
    generate.add_argument("path", help="a recipe's version folder or a .keras file of a CausalLM or Translator")
    generate.add_argument("text", help="the prompt, or the text to translate")
    generate.add_argument("--max-length", type=_positive_int, default=None,
                          help="most tokens: a translation's, or a continuation's with its prompt (default: "
                               "the model's generation config)")
    generate.add_argument("--sampler", choices=SAMPLERS, default=None,
                          help="how each token is chosen (default: the model's generation config)")
    generate.add_argument("--top-k", type=_positive_int, default=50, help="top_k: tokens sampled from (default 50)")
    generate.add_argument("--top-p", type=_probability, default=0.9, help="top_p: the mass sampled from (default 0.9)")
    generate.add_argument("--temperature", type=_positive_float, default=1.0, help="sampling temperature (default 1)")
    generate.add_argument("--seed", type=_non_negative_int, default=None, help="sampling seed (same seed, same text)")
    generate.set_defaults(run=_generate)
    demo = sub.add_parser("demo", help="try a saved task in the browser: a web page on this machine "
                          "(pip install \"kformer[demo]\")")
    demo.add_argument("path", help="a recipe's version folder or a .keras file")
    demo.add_argument("--port", type=_port, default=None,
                      help="the port to serve on (default: the first free one from 7860)")
    demo.add_argument("--host", default="127.0.0.1",
                      help="the address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every "
                           "network this machine is on, with no login)")
    demo.add_argument("--no-browser", action="store_true", help="do not open the page in a browser tab")
    demo.set_defaults(run=_demo)
    export = sub.add_parser("export", help="write a TF Serving SavedModel from any backend")
    export.add_argument("path", help="a recipe's version folder or a .keras file")
    export.add_argument("--output-dir", required=True, help="the model's base folder: writes <dir>/<next version>")
    export.add_argument("--max-image-pixels", type=_positive_int, default=None,
                        help="image classifiers: the largest image (width x height) the served graph decodes "
                             "(default 4096 x 4096); larger requests are refused from the image header")
    export.add_argument("--quantize", choices=QUANTIZE_MODES, default=None,
                        help="export the task with its weights quantized (Keras's `quantize`: int8 / int4 "
                             "weights with their scales; float8's scaled matmuls); the saved file stays as it is")
    export.set_defaults(run=_export)
    check = sub.add_parser("check-serving", help="replay a version's warmup requests as a stock TF Serving "
                           "loads it (XLA compilation off); exit 1 if one fails")
    check.add_argument("path", help="a SavedModel version folder, such as saved_models/imdb_bigram/1")
    check.add_argument("--xla", action="store_true",
                       help="as a server started with --xla_cpu_compilation_enabled=true")
    check.set_defaults(run=_check_serving)
    return p


def _int_at_least(low):
    """An argparse type: an integer >= `low` (argparse names the flag in the error)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value
    return parse


_positive_int = _int_at_least(1)  # --max-length, --max-image-pixels, --top-k
_non_negative_int = _int_at_least(0)  # --seed


def _number(text, ok, expected):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def _probability(text):
    """`--top-p`: a number in (0, 1]."""
    return _number(text, lambda v: 0 < v <= 1, "a number in (0, 1]")


def _positive_float(text):
    """`--temperature`: a finite number > 0."""
    return _number(text, lambda v: 0 < v < float("inf"), "a finite number > 0")


def _port(text):
    """`--port`: an integer in [1, 65535]."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number in [1, 65535], got {text!r}")
    return value


def _shown(text):
    """`text` for a message or the output: bytes that are not UTF-8 (an argv of any bytes) as `\\xff`."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def _check_texts(parser, texts):
    """Exit 2 naming the first argument that is not UTF-8 text (Python hands such bytes over as lone surrogates)."""
    for i, text in enumerate(texts, 1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            parser.error(f"inputs: argument {i}, '{_shown(text)}', is not UTF-8 text")


def _list(parser, args):
    if args.params:  # builds every preset: the registry itself, with keras and the backend
        from kformer import models

        table = {name: models.get_preset(name) for name in models.list_models()}
    else:  # the registry's copy that loads no backend (tests/test_cli.py keeps it equal to the registry)
        from kformer._presets import PRESETS as table
    for name, preset in table.items():
        sizes = ", ".join(f"{k}={v}" for k, v in preset.items() if k != "builder")
        count = f"{models.build(name).count_params():>13,d}  " if args.params else ""
        print(f"{name:24} {count}{preset['builder']:18} {sizes}")
    return 0


def _train(parser, argv):
    if not argv or argv[0] not in RECIPES:
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: kformer train {{{','.join(RECIPES)}}} [recipe flags]; "
                  "`kformer train imdb --help` lists a recipe's flags")
            return 0
        got = f"invalid choice: {_shown(argv[0])!r}" if argv else "expected one argument"
        parser.error(f"train: argument recipe: {got} (choose from {', '.join(RECIPES)})")
    root = _recipes_root()
    if root is None:
        sys.exit("error: `kformer train` runs the recipes of a source checkout (recipes/ and the bundled data/), "
                 "which this installation has none of: run it from the repository root, or install the "
                 "checkout with `pip install -e .`.")
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *([path] if path else [])])}
    return _run_script([sys.executable, "-m", f"recipes.{RECIPES[argv[0]]}", *argv[1:]], env=env)


def _recipes_root():
    """The checkout whose `recipes/` `kformer train` runs, or None: the working directory, else kformer's own.

    The second is the checkout an editable install (`pip install -e .`) points at, so the
    command works from any folder; a wheel install has no recipes.
    """
    for root in (pathlib.Path.cwd(), pathlib.Path(__file__).resolve().parents[1]):
        if (root / "recipes" / "__init__.py").is_file():
            return root
    return None


def _run_script(command, **kwargs):
    """Run `command` with this process's stdin, stdout and stderr; return its exit status.

    Ctrl-C reaches the child (same process group) while this process waits, as a shell
    waits for its foreground command: the recipe writes its own message and exits 130.
    A child killed by signal N returns 128 + N, as a shell reports it.
    """
    process = subprocess.Popen(command, **kwargs)  # started first: a child started ignoring SIGINT keeps ignoring it
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    try:
        while True:
            try:
                if previous is not None:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                code = process.wait()
                break
            except KeyboardInterrupt:  # came before it was ignored; the child had it too
                continue
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return 128 - code if code < 0 else code


def _load(parser, path):
    from kformer import models

    try:
        return models.load(path)
    except ValueError as err:
        parser.error(f"path: {err}")


def _predict(parser, args):
    task = _load(parser, args.path)
    length = {} if args.max_length is None else {"max_length": args.max_length}
    kind = task.task_type
    if getattr(task, "preprocessor", None) is None:
        parser.error(f"path: {args.path} holds a {type(task).__name__} without a preprocessor; "
                     "it takes model inputs (token ids, fixed-size arrays), not text or image files")
    if kind not in ("image_classification", "speech_recognition"):
        _check_texts(parser, args.inputs)
    try:
        answers = _answers(parser, task, kind, args.inputs, length)
    except ValueError as err:  # an input the model refuses (a file that is not WAV, a prompt too long, ...)
        parser.error(f"inputs: {err}")
    for given, answer in zip(args.inputs, answers):
        print(json.dumps({"input": _shown(given), "output": answer}, ensure_ascii=False))
    return 0


def _generate(parser, args):
    from kformer.generation import GreedySampler, TopKSampler, TopPSampler
    from kformer.generation.streaming import TextStreamer

    task = _load(parser, args.path)
    if task.task_type not in ("translation", "text_generation") or getattr(task, "preprocessor", None) is None:
        parser.error(f"path: {args.path} holds a {type(task).__name__}"
                     f"{'' if getattr(task, 'preprocessor', None) is not None else ' without a preprocessor'}; "
                     "`kformer generate` takes a CausalLM or Translator with its preprocessor")
    _check_texts(parser, [args.text])
    config = task.generation_config
    if args.max_length is not None:
        config = config.replace(max_length=args.max_length, max_new_tokens=None)
    sampler = {"greedy": GreedySampler(), "top_k": TopKSampler(k=args.top_k, temperature=args.temperature),
               "top_p": TopPSampler(p=args.top_p, temperature=args.temperature), None: config.sampler}[args.sampler]
    if hasattr(sampler, "num_beams"):  # a checkpoint's beam search: its beams change their past, no stream
        sampler = GreedySampler()
    config = config.replace(sampler=sampler, seed=args.seed)
    preprocessor = task.preprocessor
    try:
        if task.task_type == "translation":
            ids = preprocessor.encode([args.text])["encoder_token_ids"]
            streamer = TextStreamer(lambda t: preprocessor.detokenize([t], [args.text])[0], _write)
            out = task.generate(ids, config, streamer=streamer)
            streamer.end(preprocessor.detokenize(out, [args.text])[0])
        else:
            ids = preprocessor.prompt_ids([args.text])
            prompt = [int(i) for i in ids[0] if i]
            _write(preprocessor.detokenize([prompt])[0])
            streamer = TextStreamer(lambda t: preprocessor.detokenize([t])[0], _write, prefix=prompt)
            out = task.generate(ids, config, streamer=streamer)
            streamer.end(preprocessor.detokenize(out)[0][len(preprocessor.detokenize([prompt])[0]):])
    except ValueError as err:  # a prompt too long for --max-length, ...
        parser.error(f"text: {err}")
    return 0


def _write(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def _answers(parser, task, kind, inputs, length):
    if hasattr(task, "transcribe"):  # a speech recognizer: WAV files in, transcripts out
        return task.transcribe([_existing_file(parser, f, "audio") for f in inputs])
    if kind == "image_classification":
        return task.predict_labels([_read_image(parser, f) for f in inputs])
    if kind == "text_classification":
        return task.predict_labels(inputs)
    if kind == "translation":
        return task.translate(inputs, **length)
    if kind == "text_generation":
        return task.generate(inputs, **length)
    return task.fill_mask(inputs)


def _existing_file(parser, path, kind):
    if not pathlib.Path(path).is_file():
        parser.error(f"inputs: {kind} file '{_shown(path)}' not found")
    return path


def _read_image(parser, path):
    import tensorflow as tf

    _existing_file(parser, path, "image")
    try:  # Python reads any file name; TensorFlow's read_file takes UTF-8 ones only
        return tf.io.decode_image(pathlib.Path(path).read_bytes(), expand_animations=False).numpy()
    except tf.errors.InvalidArgumentError:
        parser.error(f"inputs: '{_shown(path)}' is not a PNG, JPEG, GIF or BMP image")


def _demo(parser, args):
    from kformer import demo

    try:
        demo.require_gradio()  # before the model loads: a missing extra is said at once
    except ImportError as err:
        sys.exit(f"error: {err}")
    task = _load(parser, args.path)
    try:
        demo.serve(task, host=args.host, port=args.port, open_browser=not args.no_browser,
                   title=demo.title_for(args.path, task), metrics=demo.read_metrics(args.path))
    except ValueError as err:
        parser.error(f"path: {err}")
    except OSError as err:  # the port is taken, or the address is not this machine's
        sys.exit(f"error: {err}")
    return 0


def _export(parser, args):
    from kformer import export

    task = _load(parser, args.path)
    out = pathlib.Path(args.output_dir)
    if out.exists() and not out.is_dir():
        parser.error(f"--output-dir {args.output_dir!r} is a file, not a directory")
    options = {} if args.max_image_pixels is None else {"max_image_pixels": args.max_image_pixels}
    try:
        if args.quantize is not None:
            task.quantize(args.quantize)
        print(export.export_for_serving(task, out, **options))
    except ValueError as err:
        sys.exit(f"error: {err}")
    except OSError as err:  # a folder this process cannot create or write (/proc/x, read-only disks)
        sys.exit(f"error: --output-dir {args.output_dir!r} cannot be written: {err.strerror or err}")
    return 0


def _signature_line(signature, errors):
    """`check-serving`'s line for one signature's warmup replies (None: ok)."""
    from kformer.export.preflight import summary

    failed = [error for error in errors if error is not None]
    if len(errors) == 1:
        return f"{signature}: {'FAILED ' + summary(failed[0]) if failed else 'ok'}"
    if failed:
        return f"{signature}: FAILED {len(failed)} of {len(errors)} warmup requests: {summary(failed[0])}"
    return f"{signature}: ok ({len(errors)} warmup requests)"


def _check_serving(parser, args):
    from kformer.export import preflight

    server = "TF Serving started with --xla_cpu_compilation_enabled=true" if args.xla else \
        "a stock TF Serving (XLA compilation off)"
    try:
        replies = preflight.check(args.path, xla=args.xla)
    except FileNotFoundError as err:
        parser.error(f"path: {err}")
    except Exception as err:  # noqa: BLE001 (a damaged SavedModel or warmup file: TF's own error, in one line)
        print(f"{args.path}: would not load in {server}: {preflight.summary(f'{type(err).__name__}: {err}')}")
        return 1
    for signature in dict.fromkeys(name for name, _ in replies):  # one line a signature, in record order
        print(_signature_line(signature, [error for name, error in replies if name == signature]))
    failed = sorted({signature for signature, error in replies if error is not None})
    print(f"{args.path}: {f'would not load in {server}: {failed} failed' if failed else f'loads in {server}'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
