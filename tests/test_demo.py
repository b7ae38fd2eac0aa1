"""`kformer demo`: one page per task kind, and the page itself driven in headless Chromium."""

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

from kformer import cli, demo, models
from kformer.data.preprocessors import (CausalLMPreprocessor, ImageClassifierPreprocessor, TextClassifierPreprocessor,
                                        TranslatorPreprocessor)
from kformer.data.wordpiece import WordPieceTokenizer

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]", "a", "fine", "film", "dull", "."]
NATIVE_LOGGING = re.compile(r"^[IWEF]\d{4} |absl::|oneDNN|cuInit|cuda drivers|TensorFlow binary", re.MULTILINE)


def gradio():
    return pytest.importorskip("gradio", reason='gradio is not installed (pip install -e ".[demo]")')


def text_classifier():
    tokenizer = WordPieceTokenizer(VOCABULARY)
    return models.text_classifier(preset="imdb_tiny", vocabulary_size=len(VOCABULARY), sequence_length=8,
                                  class_names=["negative", "positive"],
                                  preprocessor=TextClassifierPreprocessor(tokenizer, 8))


class FakeTranslator:
    task_type, preprocessor = "translation", object()

    def translate(self, texts):
        return [text.upper() for text in texts]


class FakeLM:  # ids are word numbers: the prompt's 1, 2, ..., then 7, 8, 9 streamed, then 0 (ended)
    task_type = "text_generation"
    preprocessor = types.SimpleNamespace(sequence_length=16,
                                         prompt_ids=lambda texts: np.array([[1, 2, 0]]),
                                         detokenize=lambda rows: [" ".join(f"w{i}" for i in row) for row in rows])

    def generate(self, prompts, max_length=None, streamer=None):
        for token in (7, 8, 9, 0, 0):
            streamer(np.array([token], "int32"))
        return [f"{prompt} ... ({max_length} tokens)" for prompt in prompts]


class FakeFillMask:
    task_type, preprocessor = "fill_mask", object()

    def fill_mask(self, texts):
        return [[[{"token": "good", "score": 0.5}, {"token": "bad", "score": 0.25}]] * text.count("[MASK]")
                for text in texts]


class FakeRecognizer:  # what the speech task offers: `transcribe(list of WAV paths or bytes)`
    preprocessor = object()

    def transcribe(self, audio):
        return [f"heard {os.path.basename(a)}" for a in audio]


@pytest.mark.once("Gradio pages of stand-in tasks, no keras model")
def test_each_task_kind_gets_its_page():
    gr = gradio()
    assert list(demo.build(FakeTranslator()).fn("hola")) == ["HOLA"]  # no generation config: no stream
    page = demo.build(FakeLM())
    assert list(page.fn("The film", 12)) == ["w1 w2 w7", "w1 w2 w7 w8", "w1 w2 w7 w8 w9",
                                             "The film ... (12 tokens)"]  # as it comes, then the result
    assert page.input_components[1].maximum == 16  # the slider stops at the preprocessor's length
    assert demo.build(FakeFillMask()).fn("It was [MASK].") == [[1, "good", 0.5], [1, "bad", 0.25]]
    with pytest.raises(gr.Error, match=r"Put \[MASK\] where a word should be guessed"):
        demo.build(FakeFillMask()).fn("No mask here.")
    assert demo.build(FakeRecognizer()).fn("/tmp/seven.wav") == "heard seven.wav"
    with pytest.raises(gr.Error, match="Upload or record a WAV file first"):
        demo.build(FakeRecognizer()).fn(None)


def test_classifier_pages_show_the_models_probabilities():
    gr = gradio()
    task = text_classifier()
    page = demo.build(task, metrics={"test_accuracy": 0.875, "val_accuracy": 0.5})
    shown = page.fn("A fine film.")
    expected = task.predict(["A fine film."], verbose=0)[0]
    assert list(shown) == ["negative", "positive"]
    np.testing.assert_allclose(list(shown.values()), expected, rtol=1e-5)
    assert "accuracy 0.8750" in page.description and "val" not in page.description
    with pytest.raises(gr.Error, match="Type some text first"):
        page.fn("   ")
    vit = models.vit(preset="vit_tiny", class_names=[str(i) for i in range(10)],
                     preprocessor=ImageClassifierPreprocessor(28, 1))
    image = np.random.default_rng(0).integers(0, 256, (40, 30, 3), dtype=np.uint8)  # as the page uploads it
    shown = demo.build(vit).fn(image)
    assert max(shown, key=shown.get) == vit.predict_labels([image])[0]
    assert sum(shown.values()) == pytest.approx(1.0, abs=1e-5)


def test_the_translation_page_shows_the_text_as_it_comes():
    gradio()
    tokenizer = WordPieceTokenizer(VOCABULARY)
    translator = models.translator(preset="transformer_tiny", vocabulary_size=len(VOCABULARY),
                                   preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, 8))
    end = translator.preprocessor.end_token_id  # random weights: not ended before a first token is streamed
    translator.generation_config = translator.generation_config.replace(begin_suppress_token_ids=(end,))
    shown = list(demo.build(translator).fn("a fine film"))
    assert shown[-1] == translator.translate("a fine film")  # the result last, as `translate` gives it
    assert len(shown) >= 2 and shown[-2] == shown[-1]


def test_the_text_generation_page_shows_the_text_as_it_comes():
    gradio()
    lm = models.causal_lm(preset="gpt_tiny", preprocessor=CausalLMPreprocessor(WordPieceTokenizer(VOCABULARY), 16))
    lm.generation_config = lm.generation_config.replace(begin_suppress_token_ids=(lm.preprocessor.end_token_id,))
    shown = list(demo.build(lm).fn("a fine", 9))
    assert shown[-1] == lm.generate(["a fine"], max_length=9)[0]  # the result last
    assert len(shown) >= 2 and shown[-2] == shown[-1]  # the last streamed text is the result's
    assert all(text.startswith("a fine") for text in shown)


def test_tasks_without_a_page_are_refused_naming_why():
    with pytest.raises(ValueError, match="must have a preprocessor"):
        demo.kind_of(models.text_classifier(preset="imdb_tiny", vocabulary_size=20, sequence_length=8))
    with pytest.raises(ValueError, match="task_type=None"):
        demo.kind_of(object())


@pytest.mark.once("the Gradio import check before any model loads")
def test_without_gradio_the_error_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` raises ImportError
    with pytest.raises(ImportError, match=re.escape('pip install "kformer[demo]"')):
        demo.require_gradio()
    with pytest.raises(SystemExit, match=re.escape('which is not installed: pip install "kformer[demo]"')):
        cli.main(["demo", "no/such/model.keras"])  # said before any model is loaded


def test_title_and_bad_port():
    assert demo.title_for("saved_models/imdb_bigram/3", text_classifier()) == \
        "imdb_bigram, version 3: text classification"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "x.keras", "--port", "70000"])
    assert exit_info.value.code == 2


def _chromium():
    """Headless Chromium under Selenium (Debian's chromium + chromium-driver), or a skip naming what is missing."""
    gradio()
    webdriver = pytest.importorskip("selenium.webdriver", reason='selenium is not installed (pip install -e ".[test]")')
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("no Chromium and chromedriver on PATH (apt-get install -y chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1200,800"):
        options.add_argument(flag)
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=options)  # no download


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lines(stream, into):
    for line in stream:
        into.put(line)


@pytest.mark.only_backend("tensorflow")  # the pages' answers are checked on all three above
def test_kformer_demo_answers_in_the_browser(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _chromium()
    task = text_classifier()
    task.save(tmp_path / "model.keras")
    text = "A fine film."
    probabilities = dict(zip(task.class_names, task.predict([text], verbose=0)[0]))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "KFORMER_VERBOSE")}  # a shell's
    server = subprocess.Popen([sys.executable, "-m", "kformer.cli", "demo", str(tmp_path / "model.keras"),
                               "--port", str(port), "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    out, err = queue.Queue(), queue.Queue()
    for stream, into in ((server.stdout, out), (server.stderr, err)):
        threading.Thread(target=_lines, args=(stream, into), daemon=True).start()
    try:
        deadline, line = time.monotonic() + 180, ""
        while not line.startswith("kformer demo:"):
            assert server.poll() is None and time.monotonic() < deadline, list(err.queue)
            try:
                line = out.get(timeout=1)
            except queue.Empty:
                pass
        url = f"http://127.0.0.1:{port}/"
        assert line.strip() == f"kformer demo: model.keras: text classification at {url} (Ctrl-C to stop)"
        driver.get(url)
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#kformer-input textarea")).send_keys(text)
        driver.find_element(By.XPATH, "//button[normalize-space()='Submit']").click()
        label = wait.until(lambda d: d.find_element(
            By.CSS_SELECTOR, "#kformer-output [data-testid='label-output-value']").text.strip() or None)
        assert label == max(probabilities, key=probabilities.get)
        rows = driver.find_element(By.CSS_SELECTOR, "#kformer-output").text.split("\n")
        for name, p in probabilities.items():  # each class with its probability, as a whole percentage
            shown = rows[rows.index(name, rows.index(label) + 1) + 1]
            assert abs(float(shown.rstrip("%")) - 100 * p) <= 1, rows
        assert re.search(r"Classes:\s*negative\s*,\s*positive", driver.find_element(By.TAG_NAME, "body").text)
        driver.save_screenshot(str(tmp_path / "demo.png"))
    finally:
        driver.quit()
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    assert server.returncode == 0, list(err.queue)
    assert "kformer demo: stopped\n" in list(out.queue)
    assert not NATIVE_LOGGING.search("".join(err.queue)), "".join(err.queue)
