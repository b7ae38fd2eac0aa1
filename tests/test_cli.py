"""The `kformer` command line: list, predict, export, train dispatch and flag errors."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kformer
from kformer import cli, models
from kformer.data.preprocessors import TextClassifierPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]", "a", "fine", "film", "dull", "."]


@pytest.mark.once("the preset registry's copy printed, no keras")
def test_list_prints_every_preset(capsys):
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == models.list_models()
    assert any(line.startswith("gpt2_small") and "causal_lm" in line for line in lines)


# TensorFlow's, XLA's and absl's C++ logging (glog-style "I0000 00:00:..." lines) and its start-up notes.
NATIVE_LOGGING = re.compile(r"^[IWEF]\d{4} |absl::|oneDNN|cuInit|cuda drivers|TensorFlow binary", re.MULTILINE)
# Runs the command line, then reports which heavy modules the process loaded (also after --help's SystemExit).
REPORT_MODULES = ("import atexit, sys\n"
                  "atexit.register(lambda: print('loaded:', sorted({m.split('.')[0] for m in sys.modules} & "
                  "{'keras', 'tensorflow', 'jax', 'torch', 'gradio'}), file=sys.stderr))\n"
                  "from kformer.cli import main\nsys.exit(main())")


def shell_env(**extra):
    """The environment a user's shell gives the command: no logging level or verbosity of the test run's own."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "KFORMER_VERBOSE")}
    return {**env, **extra}


@pytest.mark.once("subprocess that loads no backend")
@pytest.mark.parametrize("argv, expected", [
    (["--help"], "usage: kformer [-h] [--version] [-v]"),
    (["--version"], f"kformer {kformer.__version__} (keras "),
    (["list"], "gpt2_small"),
    (["predict", "--help"], "usage: kformer predict"),
])
def test_help_version_and_list_load_no_backend_and_print_no_native_logging(argv, expected):
    ran = subprocess.run([sys.executable, "-c", REPORT_MODULES, *argv], env=shell_env(), capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert expected in ran.stdout
    assert "loaded: []" in ran.stderr  # not even keras (which imports JAX when it is installed)
    assert not NATIVE_LOGGING.search(ran.stdout + ran.stderr), ran.stderr


@pytest.mark.once("subprocesses that import TensorFlow directly, not keras")
def test_quiet_startup_mutes_tensorflows_start_up_only():
    """The first `import tensorflow` runs with stderr muted; Python's own lines before and after stay."""
    code = ("import sys\nfrom kformer import runtime\nassert runtime.quiet_startup()\n"
            "print('before', file=sys.stderr, flush=True)\nimport tensorflow as tf\n"
            "print(int(tf.constant(1) + 1), file=sys.stderr)\n"
            "assert not runtime.quiet_startup()  # TensorFlow is loaded: nothing left to do")
    ran = subprocess.run([sys.executable, "-c", code], env=shell_env(), capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.split() == ["before", "2"], ran.stderr
    verbose = subprocess.run([sys.executable, "-c", "from kformer import runtime; print(runtime.quiet_startup())"],
                             env=shell_env(KFORMER_VERBOSE="1"), capture_output=True, text=True, timeout=120)
    assert verbose.stdout.strip() == "False", verbose.stderr  # asked for: the logging is left as it is


@pytest.mark.once("subprocess that imports TensorFlow directly, not keras")
def test_an_import_error_in_tensorflow_still_shows():
    """Muting stderr while TensorFlow loads hides its logging, not a failure to load it."""
    code = ("import sys\nfrom kformer import runtime\nruntime.quiet_startup()\n"
            "sys.modules['tensorflow.python'] = None  # breaks `import tensorflow` inside its own __init__\n"
            "import tensorflow")
    ran = subprocess.run([sys.executable, "-c", code], env=shell_env(), capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1
    assert "Traceback" in ran.stderr and "import of tensorflow.python halted" in ran.stderr, ran.stderr


PRESETS_FILE = Path(cli.__file__).with_name("_presets.py")


def presets_source():
    """`kformer/_presets.py` as the registry has it now: what `kformer list` prints without loading keras."""
    entries = ""
    for name in models.list_models():
        lines = [""]
        for key, value in models.get_preset(name).items():  # whole `key: value` items, up to 100 characters a line
            item = f"{key!r}: {value!r},"
            lines[-1:] = [f"{lines[-1]} {item}".strip()] if len(lines[-1]) + len(item) < 100 else [lines[-1], item]
        entries += f"    {name!r}: {{\n" + "".join(f"        {line}\n" for line in lines) + "    },\n"
    return ('"""The preset registry\'s names and arguments, for `kformer list` without keras or a backend.\n\n'
            "Written by `python -m tests.test_cli` from `kformer.models.get_preset`; tests/test_cli.py fails\n"
            'when this copy differs from the registry (a preset added, removed or changed): rerun it then.\n"""\n\n'
            f"PRESETS = {{\n{entries}}}\n")


@pytest.mark.once("the preset registry's dicts against a source file")
def test_presets_copy_matches_the_registry():
    assert PRESETS_FILE.read_text() == presets_source(), (
        "kformer/_presets.py differs from the preset registry: run `python -m tests.test_cli` to rewrite it")


@pytest.fixture(scope="module")
def classifier_path(tmp_path_factory):
    tokenizer = WordPieceTokenizer(VOCABULARY)
    model = models.text_classifier(preset="imdb_tiny", vocabulary_size=len(VOCABULARY), sequence_length=8,
                                   class_names=["negative", "positive"],
                                   preprocessor=TextClassifierPreprocessor(tokenizer, 8))
    path = tmp_path_factory.mktemp("cli") / "model.keras"
    model.save(path)
    return path, model.predict_labels(["A fine film.", "Dull."])


def test_predict_prints_one_json_answer_per_input(classifier_path, capsys):
    path, labels = classifier_path
    assert cli.main(["predict", str(path), "A fine film.", "Dull."]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert answers == [{"input": "A fine film.", "output": labels[0]}, {"input": "Dull.", "output": labels[1]}]


@pytest.mark.once("the audio is read and checked in NumPy before the model runs")
def test_predict_names_an_audio_file_a_speech_model_cannot_read(tmp_path, capsys):
    """Issue 75 (12): `predict speech.keras /etc/hostname` (or an A-law WAV) ended in a TensorFlow traceback."""
    from kformer.data.preprocessors import AudioPreprocessor

    model = models.speech_recognizer(preset="conformer_speech_tiny", num_features=16, num_layers=1, hidden_dim=16,
                                     num_heads=2, kernel_size=3, intermediate_dim=32,
                                     preprocessor=AudioPreprocessor(num_mel_bins=16))
    model.save(tmp_path / "speech.keras")
    (tmp_path / "notes.txt").write_text("not audio")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["predict", str(tmp_path / "speech.keras"), str(tmp_path / "notes.txt")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "inputs: `audio[0] (" in err and "is not a WAV file" in err, err


@pytest.mark.tf_only
def test_export_writes_the_next_version(classifier_path, tmp_path, capsys):
    path, _ = classifier_path
    assert cli.main(["export", str(path), f"--output-dir={tmp_path}"]) == 0
    assert capsys.readouterr().out.strip().endswith(str(tmp_path / "1"))
    assert (tmp_path / "1" / "saved_model.pb").is_file()
    import tensorflow as tf  # tf_only

    assert cli.main(["export", str(path), f"--output-dir={tmp_path}", "--quantize=int8"]) == 0
    assert capsys.readouterr().out.strip().endswith(str(tmp_path / "2"))
    dtypes = {str(d) for d in tf.train.load_checkpoint(str(tmp_path / "2" / "variables" / "variables"))
              .get_variable_to_dtype_map().values()}
    assert "<dtype: 'int8'>" in dtypes
    assert not models.load(path).get_config().get("quantized_layers")  # the saved file is left float
    with pytest.raises(SystemExit, match="`max_image_pixels`"):  # a text classifier takes no image limit
        cli.main(["export", str(path), f"--output-dir={tmp_path}", "--max-image-pixels=100"])
    if os.path.exists("/proc/self"):  # a folder no one can make there: an OSError traceback before
        with pytest.raises(SystemExit, match=r"error: --output-dir '/proc/kformer-x' cannot be written: "):
            cli.main(["export", str(path), "--output-dir=/proc/kformer-x"])


@pytest.mark.once("argparse and path checks before any model loads")
@pytest.mark.parametrize("argv, message", [
    (["predict", "/no/such/model.keras", "text"], "path: `path` must be a `.keras` file"),
    (["train", "nope"],
     "argument recipe: invalid choice: 'nope' (choose from imdb, translator, bert, vit, gpt, speech)"),
    (["train"], "train: argument recipe: expected one argument (choose from imdb,"),
    (["list", "--bogus"], "unrecognized arguments: --bogus"),
    (["export", "x.keras"], "--output-dir"),
    (["export", "x.keras", "--output-dir=d", "--max-image-pixels=0"], "--max-image-pixels: expected an integer >= 1"),
    (["export", "x.keras", "--output-dir=d", "--quantize=int3"],
     "--quantize: invalid choice: 'int3' (choose from 'int8', 'int4', 'float8')"),
    (["check-serving", "/no/such/version"], "path: `version_dir` '/no/such/version' is not a folder"),
    (["check-serving", "."], "holds no saved_model.pb"),
])
def test_bad_flags_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_image_files_are_classified(tmp_path, capsys):
    import tensorflow as tf

    from kformer.data.preprocessors import ImageClassifierPreprocessor

    model = models.vit(preset="vit_tiny", class_names=[str(i) for i in range(10)],
                       preprocessor=ImageClassifierPreprocessor(28, 1))
    model.save(tmp_path / "vit.keras")
    image = np.random.default_rng(0).integers(0, 256, (40, 30, 3), dtype=np.uint8)  # resized, grayed
    (tmp_path / "digit.png").write_bytes(tf.io.encode_png(image).numpy())
    odd_name = tmp_path / os.fsdecode(b"digit-\xff.png")  # a file name that is not UTF-8: read all the same
    odd_name.write_bytes((tmp_path / "digit.png").read_bytes())
    assert cli.main(["predict", str(tmp_path / "vit.keras"), str(tmp_path / "digit.png"), str(odd_name)]) == 0
    answer, same = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert answer["output"] in [str(i) for i in range(10)] and same["output"] == answer["output"]
    assert same["input"] == str(tmp_path / "digit-\\xff.png")
    with pytest.raises(SystemExit):
        cli.main(["predict", str(tmp_path / "vit.keras"), str(tmp_path / "vit.keras")])
    assert "is not a PNG, JPEG" in capsys.readouterr().err


@pytest.mark.tf_only
def test_installed_script_trains_from_any_folder(tmp_path):
    script = Path(sys.executable).parent / "kformer"
    if not script.is_file():
        pytest.skip("the `kformer` console script is not installed (pip install -e .)")
    root = Path(__file__).resolve().parents[1]
    env = shell_env(KERAS_BACKEND="tensorflow")
    env.pop("PYTHONPATH", None)  # as a user's shell has it: only the script's own sys.path
    for cwd in (root, tmp_path):  # the checkout, or any folder (the editable install's checkout)
        ran = subprocess.run([str(script), "train", "imdb", "--help"], cwd=cwd, env=env, capture_output=True,
                             text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr
        assert "--data-dir" in ran.stdout and "--preset" in ran.stdout
        assert not NATIVE_LOGGING.search(ran.stderr), ran.stderr  # the recipe loaded TensorFlow quietly


@pytest.mark.once("recipe subprocess refused by argparse before any backend code")
def test_train_runs_the_recipe_as_a_script_and_passes_its_exit_status_on(tmp_path, capfd):
    """The library imports no recipe: the recipe runs in its own process, its flag errors exit 2."""
    code = ("import sys\nfrom kformer import cli\nstatus = cli.main(['train', 'imdb', '--learning-rate=nan'])\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'recipes'], 'imported recipes'\n"
            "sys.exit(status)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 2, ran.stderr
    assert "argument --learning-rate: expected a finite number > 0.0, got nan" in ran.stderr


@pytest.mark.once("argument check before any recipe or backend code")
def test_train_without_a_checkout_says_where_recipes_live(monkeypatch):
    monkeypatch.setattr(cli, "_recipes_root", lambda: None)
    with pytest.raises(SystemExit, match="runs the recipes of a source checkout"):
        cli.main(["train", "imdb", "--help"])


CHILD = """
import signal, sys, time
if sys.argv[1] == "signal":
    signal.raise_signal(signal.SIGTERM)
print("ready", flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("interrupted in the recipe", file=sys.stderr, flush=True)
    sys.exit(130)
"""


@pytest.mark.once("signals between plain-Python processes that load no backend")
@pytest.mark.parametrize("how, status", [("ctrl-c", 130), ("signal", 128 + 15)])
def test_train_passes_ctrl_c_to_the_recipe_and_exits_as_it_does(how, status):
    """Ctrl-C (SIGINT to the terminal's process group) reaches the recipe, which exits 130; a signal: 128 + N."""
    import signal
    import time

    parent = (f"import sys\nfrom kformer.cli import _run_script\n"
              f"sys.exit(_run_script([sys.executable, '-c', {CHILD!r}, {how!r}]))")
    started = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # its own process group, as a terminal's job
    if how == "ctrl-c":
        assert started.stdout.readline() == "ready\n"
        time.sleep(0.5)
        os.killpg(started.pid, signal.SIGINT)
    _, err = started.communicate(timeout=120)
    assert started.returncode == status, err
    assert ("interrupted in the recipe" in err) == (how == "ctrl-c")


@pytest.mark.parametrize("argv, message", [
    (["--max-length=-1"], "argument --max-length: expected an integer >= 1, got '-1'"),
    (["--max-length=0"], "argument --max-length: expected an integer >= 1, got '0'"),
    (["--max-length=2.5"], "argument --max-length: expected an integer >= 1, got '2.5'"),
    ([os.fsdecode(b"\xff\xfe")], r"inputs: argument 2, '\xff\xfe', is not UTF-8 text"),  # argv bytes
])
def test_predict_refuses_a_bad_max_length_or_text_that_is_not_utf8(classifier_path, argv, message, capsys):
    path, _ = classifier_path
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["predict", str(path), "A fine film.", *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


if __name__ == "__main__":  # rewrite kformer/_presets.py from the registry
    PRESETS_FILE.write_text(presets_source())
    print(f"wrote {PRESETS_FILE}")
