"""`kformer demo`: try a saved task in a browser, on a small web page served from this machine.

    kformer demo saved_models/imdb_bigram/1          # opens http://127.0.0.1:7860
    pip install "kformer[demo]"                      # Gradio, which builds the page

One page per kind of task, chosen by the task's `task_type` (and, for a
speech recognizer, by its `transcribe` method): a text box in, and out a
label with its probabilities (text classifiers), a translation, a
continuation (text generation, with a length slider) or a table of the
likeliest tokens for each `[MASK]` (fill-mask); an image upload in and a
label out (image classifiers); an audio upload or recording in and its
transcript out (speech recognizers). The page is built with Gradio
(`build`), imported only here and only when a page is built, and served on
127.0.0.1 by default (`serve`), with Gradio's usage statistics off and no
font or script fetched from the internet.
"""

import inspect
import json
import os
import pathlib
import queue
import threading
import time

INSTALL_HINT = 'pip install "kformer[demo]"'
_SYSTEM_FONTS = ["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"]
_MONO_FONTS = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]
_KINDS = {"text_classification": "Text classification", "image_classification": "Image classification",
          "translation": "Translation", "text_generation": "Text generation", "fill_mask": "Fill-mask",
          "speech_recognition": "Speech recognition"}


def require_gradio():
    """Gradio, imported; or an ImportError that names the extra to install.

    Returns:
        The `gradio` module.

    Example:

    >>> try:
    ...     gradio = require_gradio()
    ... except ImportError as err:
    ...     assert 'pip install "kformer[demo]"' in str(err)
    """
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no usage statistics, no version check online
    try:
        import gradio
    except ImportError as err:
        raise ImportError(f"`kformer demo` builds its page with Gradio, which is not installed: {INSTALL_HINT}") \
            from err
    return gradio


def kind_of(task):
    """The demo page a task gets: its `task_type`, or `"speech_recognition"` for any object with `transcribe`.

    Args:
        task: a loaded kformer task (`kformer.models.load(path)`).

    Returns:
        str: a key of the page table (`"text_classification"`, `"image_classification"`,
        `"translation"`, `"text_generation"`, `"fill_mask"` or `"speech_recognition"`).

    Raises:
        ValueError: for a model without a preprocessor (it takes token ids, not text or images)
            or of a kind the demo has no page for.

    Example:

    >>> class Recognizer:
    ...     preprocessor = object()
    ...     def transcribe(self, audio):
    ...         return ["hello" for _ in audio]
    >>> kind_of(Recognizer())
    'speech_recognition'
    """
    kind = "speech_recognition" if callable(getattr(task, "transcribe", None)) else getattr(task, "task_type", None)
    if kind not in _KINDS:
        raise ValueError(f"`task` must be a kformer task with a demo page ({', '.join(_KINDS)}). Received: a "
                         f"{type(task).__name__} with task_type={getattr(task, 'task_type', None)!r}")
    if getattr(task, "preprocessor", None) is None:
        raise ValueError(f"`task` must have a preprocessor: this {type(task).__name__} takes model inputs "
                         "(token ids, fixed-size arrays), not text, images or audio. Received: preprocessor=None")
    return kind


def title_for(path, task=None):
    """The page's title for a saved task: `imdb_bigram, version 3` for a version folder, else the file's name.

    Args:
        path: str or path. The version folder or `.keras` file the task was loaded from.
        task: the loaded task, or None; its kind is added when given.

    Returns:
        str.

    Example:

    >>> title_for("saved_models/imdb_bigram/3")
    'imdb_bigram, version 3'
    >>> title_for("exports/model.keras")
    'model.keras'
    """
    path = pathlib.Path(path)
    name = f"{path.parent.name}, version {path.name}" if path.name.isdigit() and path.parent.name else path.name
    kind = None
    if task is not None:
        try:
            kind = _KINDS[kind_of(task)]
        except ValueError:
            pass
    return f"{name}: {kind.lower()}" if kind else name


def build(task, *, title=None, description=None, metrics=None):
    """A Gradio page (`gradio.Blocks`) that answers the inputs typed or uploaded into it with `task`.

    Args:
        task: a kformer task with a preprocessor: a text or image classifier,
            a translator, a causal LM, a BERT fill-mask model, or any object
            with `transcribe(list of WAV paths or bytes) -> list of str`.
        title: str or None. The page's heading. Defaults to the task's kind.
        description: str or None. Markdown under the heading. Defaults to
            what to type, the classes, and `metrics`.
        metrics: dict or None. Scores to show under the heading (a version
            folder's `metrics.json`): the numbers whose key starts with `test_`.

    Returns:
        `gradio.Blocks`; `serve` launches it (or call its `launch()`).

    Raises:
        ImportError: Gradio is not installed (the message says how to install it).
        ValueError: the task has no page (see `kind_of`).

    Example:

    >>> from kformer import models
    >>> task = models.load("saved_models/imdb_bigram/1")  # doctest: +SKIP
    >>> page = build(task, title="IMDB reviews")  # doctest: +SKIP
    >>> page.launch()  # doctest: +SKIP
    """
    kind = kind_of(task)
    gr = require_gradio()
    page = _PAGES[kind](task, gr)
    heading = title or _KINDS[kind]
    text = description if description is not None else _describe(task, page["hint"], metrics)
    return gr.Interface(
        fn=_shown_errors(gr, page["fn"]), inputs=page["inputs"], outputs=page["outputs"],
        examples=page.get("examples"),
        title=heading, description=text, flagging_mode="never", analytics_enabled=False,
        submit_btn=page.get("submit", "Submit"), api_name="predict")


def _theme(gr):
    """Gradio's Soft theme in the system's fonts: the page fetches nothing from the internet."""
    return gr.themes.Soft(primary_hue="indigo", font=_SYSTEM_FONTS, font_mono=_MONO_FONTS)


def serve(task, *, host="127.0.0.1", port=None, open_browser=False, title=None, metrics=None, block=True):
    """Serve `build(task)` on `host:port` and print its address; with `block`, until Ctrl-C.

    Args:
        task: a task `build` takes, or a str / path to load with `kformer.models.load`.
        host: str. The address to listen on. Defaults to `"127.0.0.1"` (this
            machine only); `"0.0.0.0"` serves every network the machine is on,
            without a login.
        port: int or None. Defaults to the first free port from 7860.
        open_browser: bool. Open the page in the default browser. Defaults to `False`.
        title: str or None. The page's heading (`title_for(path)` when `task` is a path).
        metrics: dict or None. Scores shown under the heading; read from the
            version folder's `metrics.json` when `task` is a path.
        block: bool. Wait until Ctrl-C, then stop the server. Defaults to
            `True`; `False` returns at once (stop it with `page.close()`).

    Returns:
        `(page, url)`: the `gradio.Blocks` and the address it is served at.

    Raises:
        ImportError: Gradio is not installed.
        OSError: the port is taken, or `host` is not an address of this machine.

    Example:

    >>> page, url = serve("saved_models/imdb_bigram/1", block=False)  # doctest: +SKIP
    >>> url  # doctest: +SKIP
    'http://127.0.0.1:7860/'
    >>> page.close()  # doctest: +SKIP
    """
    gr = require_gradio()  # before a model loads
    if isinstance(task, (str, os.PathLike)):
        from kformer import models

        path, task = task, models.load(task)
        title = title or title_for(path, task)
        metrics = metrics if metrics is not None else read_metrics(path)
    page = build(task, title=title, metrics=metrics)
    _, url, _ = page.launch(server_name=host, server_port=port, inbrowser=open_browser, prevent_thread_lock=True,
                            quiet=True, show_error=True, theme=_theme(gr))
    print(f"kformer demo: {title or _KINDS[kind_of(task)]} at {url}" + (" (Ctrl-C to stop)" if block else ""),
          flush=True)
    if block:
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            print("kformer demo: stopped", flush=True)
        finally:
            page.close()
    return page, url


def read_metrics(path):
    """A version folder's `metrics.json` (dict), or None where `path` has none (a `.keras` file).

    Args:
        path: str or path. A version folder or a `.keras` file.

    Returns:
        dict or None.

    Example:

    >>> read_metrics("no/such/folder") is None
    True
    """
    file = pathlib.Path(path) / "metrics.json"
    try:
        metrics = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return metrics if isinstance(metrics, dict) else None


def _describe(task, hint, metrics):
    lines = [hint]
    names = getattr(task, "class_names", None)
    if names:
        lines.append(f"Classes: {', '.join(f'`{n}`' for n in names[:20])}{' ...' if len(names) > 20 else ''}.")
    scores = [f"{k[len('test_'):].replace('_', ' ')} {v:.4f}" for k, v in (metrics or {}).items()
              if k.startswith("test_") and isinstance(v, float)][:3]
    if scores:
        lines.append(f"On its test set: {', '.join(scores)}.")
    return "\n\n".join(lines)


def _shown_errors(gr, fn):
    """`fn`, with a ValueError (an input the model refuses) shown on the page as its message (a generator
    `fn`, whose page shows each value it yields, stays one)."""
    if inspect.isgeneratorfunction(fn):
        def answers(*inputs):
            try:
                yield from fn(*inputs)
            except ValueError as err:
                raise gr.Error(str(err)) from err
        return answers

    def answer(*inputs):
        try:
            return fn(*inputs)
        except ValueError as err:
            raise gr.Error(str(err)) from err
    return answer


def _streamed(run, text_of):
    """Yield the text so far while `run(streamer)` decodes in a thread, then its result's first text.

    `streamer` collects row 0's tokens (to its first 0: the row ended); `text_of(tokens)` is their text."""
    updates, tokens, outcome = queue.Queue(), [], {}

    def streamer(step):
        token = int(step[0])
        if token and (not tokens or tokens[-1]):
            tokens.append(token)
            updates.put(text_of(list(tokens)))
        elif tokens and tokens[-1]:
            tokens.append(0)  # ended: later steps are 0 too

    def target():
        try:
            outcome["result"] = run(streamer)
        except Exception as err:  # raised again below, in the page's thread
            outcome["error"] = err
        updates.put(None)

    threading.Thread(target=target, daemon=True).start()
    while (text := updates.get()) is not None:
        yield text
    if "error" in outcome:
        raise outcome["error"]
    yield outcome["result"][0]


def _text(value, what="some text"):
    if value is None or not str(value).strip():
        raise ValueError(f"Type {what} first.")
    return str(value)


def _labelled(task, probabilities):
    names = task.class_names or [str(i) for i in range(len(probabilities))]
    return {name: float(p) for name, p in zip(names, probabilities)}


def _text_classification(task, gr):
    def answer(text):
        return _labelled(task, task.predict([_text(text)], verbose=0)[0])

    return {"fn": answer, "hint": "Type a text: the model's label for it, and how likely it finds each class.",
            "inputs": gr.Textbox(elem_id="kformer-input", label="Text", lines=4,
                                 placeholder="A wonderful, moving film."),
            "outputs": gr.Label(elem_id="kformer-output", label="Label", num_top_classes=5),
            "examples": [["A wonderful, moving film, though the ending drags a little."],
                         ["Dull, predictable and far too long."]]}


def _image_classification(task, gr):
    def answer(image):
        if image is None:
            raise ValueError("Upload an image first.")
        return _labelled(task, task.predict([image], verbose=0)[0])

    return {"fn": answer, "hint": "Upload an image (PNG, JPEG, GIF or BMP): the model's label, and how likely "
                                  "it finds each class.",
            "inputs": gr.Image(elem_id="kformer-input", label="Image", type="numpy", image_mode="RGB",
                               sources=["upload", "clipboard"]),
            "outputs": gr.Label(elem_id="kformer-output", label="Label", num_top_classes=5), "submit": "Classify"}


def _translation(task, gr):
    def answer(text):  # a generator: the page shows the translation as it comes (one token a step)
        text = _text(text)
        config = getattr(task, "generation_config", None)
        if config is None or getattr(config.sampler, "num_beams", 1) > 1:  # a beam search changes its past
            yield task.translate([text])[0]
            return
        preprocessor = task.preprocessor
        ids = preprocessor.encode([text])["encoder_token_ids"]
        yield from _streamed(lambda streamer: preprocessor.detokenize(task.generate(ids, streamer=streamer), [text]),
                             lambda tokens: preprocessor.detokenize([tokens], [text])[0])

    return {"fn": answer, "hint": "Type a sentence in the language the model was trained to translate from.",
            "inputs": gr.Textbox(elem_id="kformer-input", label="Source", lines=3,
                                 placeholder="A sentence to translate"),
            "outputs": gr.Textbox(elem_id="kformer-output", label="Translation", lines=3), "submit": "Translate"}


def _text_generation(task, gr):
    longest = int(task.preprocessor.sequence_length)

    def answer(prompt, length):  # a generator: the page shows the text as it comes
        prompt = _text(prompt, "a prompt")
        ids = [int(i) for i in task.preprocessor.prompt_ids([prompt])[0] if i]
        yield from _streamed(lambda streamer: task.generate([prompt], max_length=int(length), streamer=streamer),
                             lambda tokens: task.preprocessor.detokenize([ids + tokens])[0])

    return {"fn": answer, "hint": "Type the start of a text: the model continues it (greedy decoding), "
                                  "shown as it comes.",
            "inputs": [gr.Textbox(elem_id="kformer-input", label="Prompt", lines=3, placeholder="The movie was"),
                       gr.Slider(2, longest, value=min(48, longest), step=1, label="Length in tokens, prompt included")],
            "outputs": gr.Textbox(elem_id="kformer-output", label="Continuation", lines=5), "submit": "Continue",
            "examples": [["The movie was", min(48, longest)]]}


def _fill_mask(task, gr):
    def answer(text):
        text = _text(text)
        masks = task.fill_mask([text])[0]
        if not masks:
            raise ValueError("Put [MASK] where a word should be guessed, e.g. 'The film was [MASK].'")
        return [[i, c["token"], round(float(c["score"]), 4)] for i, candidates in enumerate(masks, 1)
                for c in candidates]

    return {"fn": answer, "hint": "Type a text with `[MASK]` in place of a word: the likeliest words for each.",
            "inputs": gr.Textbox(elem_id="kformer-input", label="Text with [MASK]", lines=3,
                                 placeholder="The film was [MASK]."),
            "outputs": gr.Dataframe(elem_id="kformer-output", headers=["[MASK]", "token", "score"],
                                    label="Likeliest tokens"),
            "examples": [["This movie was [MASK], and the acting was great."]], "submit": "Fill"}


def _speech_recognition(task, gr):
    def answer(audio):
        if audio is None:
            raise ValueError("Upload or record a WAV file first.")
        return task.transcribe([audio])[0]

    return {"fn": answer, "hint": "Upload or record speech (WAV): the model's transcript.",
            "inputs": gr.Audio(elem_id="kformer-input", label="Audio", sources=["upload", "microphone"],
                               type="filepath", format="wav"),
            "outputs": gr.Textbox(elem_id="kformer-output", label="Transcript"), "submit": "Transcribe"}


_PAGES = {"text_classification": _text_classification, "image_classification": _image_classification,
          "translation": _translation, "text_generation": _text_generation, "fill_mask": _fill_mask,
          "speech_recognition": _speech_recognition}
