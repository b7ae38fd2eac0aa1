import csv
import json

import pytest

from benchmarks import imdb_short_text


def test_rows_from_finished_runs_and_the_naive_bayes_anchor(tmp_path):
    run = tmp_path / "runs" / "mask_windows_0.3" / "imdb_bigram"
    metrics = {"val_accuracy": 0.884, "val_ood_first_sentence_accuracy": 0.716, "val_ood_crop_10_30_accuracy": 0.66,
               "test_accuracy": 0.861, "ood_first_sentence_accuracy": 0.6925, "ood_crop_10_30_accuracy": 0.704,
               "train_examples": 4500, "val_examples": 500, "test_examples": 2000, "train_seconds": 145.1,
               "backend": "jax"}
    for version, scale in (("1", 0.5), ("2", 1.0)):  # the newest version folder is read
        (run / version).mkdir(parents=True)
        (run / version / "metrics.json").write_text(json.dumps({k: v * scale if k.endswith("accuracy") else v
                                                                for k, v in metrics.items()}))
    results = tmp_path / "rows.csv"
    imdb_short_text.main(["--settings", "mask_windows_0.3,naive_bayes", "--output-dir", str(tmp_path / "runs"),
                          "--reuse", "--results", str(results)])
    with results.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["setting"] for r in rows] == ["mask_windows_0.3", "naive_bayes"]
    ours, anchor = rows
    assert ours["flags"] == "--mask-padding --window-augmentation=0.3" and ours["backend"] == "jax"
    assert (float(ours["val_first_sentence"]), float(ours["test_crop_10_30"])) == (71.6, 70.4)
    assert ours["data"] == "bundled sample: 4,500 train, 500 validation, 2,000 test reviews"
    # the anchor fits on the bundled training reviews: a real classifier, well above chance on every split
    assert all(60 < float(anchor[k]) < 100 for k in imdb_short_text.HEADER[3:9])
    assert ours["commit"] and ours["date"] and ours["machine"]


def test_unknown_settings_are_named(capsys):
    with pytest.raises(SystemExit):
        imdb_short_text.parse_args(["--settings", "before,bogus"])
    assert "bogus" in capsys.readouterr().err
