"""train_gpt with experts end to end on a tiny slice: routing in the log and metrics, the expert-load figure."""

import csv
import json

import pytest

from kformer import models
from recipes import train_gpt
from tests.helpers import assert_figures

TINY = ["--epochs=1", "--max-examples=16", "--verbose=2", "--vocabulary-size=200", "--sequence-length=16",
        "--sample-length=8", "--batch-size=32", "--no-export"]


@pytest.mark.only_backend("torch")  # the dense recipe runs on JAX (test_recipes.py); fit's logs on all three
def test_num_experts_trains_a_mixture_of_experts_and_plots_its_load(tmp_path):
    run_dir = train_gpt.main(TINY + ["--num-experts=4", f"--output-dir={tmp_path}"])
    assert run_dir == tmp_path / "gpt_tiny_4experts" / "1"
    config = json.loads((run_dir / "config.json").read_text())
    # 4 experts, top-2 by default, each half of gpt_tiny's 512: the dense feed-forward's FLOPs per token
    assert (config["num_experts"], config["expert_intermediate_dim"]) == (4, 256)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0.5 < metrics["moe_balancing_loss"] < 4.0 and 0.0 <= metrics["moe_dropped_fraction"] < 1.0
    assert metrics["moe_dropped_tokens"] >= 0.0 and 1.0 < metrics["validation_perplexity"] < 300
    with open(run_dir / "training_log.csv", newline="") as f:
        log = list(csv.DictReader(f))
    assert {"moe_balancing_loss", "moe_dropped_tokens", "moe_dropped_fraction"} <= set(log[0])
    model = models.load(run_dir)
    assert [block.num_experts for block in model.decoder_blocks] == [0, 4]
    assert isinstance(model.generate("The movie was", max_length=8), str)
    assert_figures(run_dir, names=("curves.png", "attention.png", "expert_load.png"))


def test_expert_flags_need_experts():
    with pytest.raises(SystemExit):
        train_gpt.parse_args(["--top-k=2"])  # gpt_tiny has no experts
    with pytest.raises(SystemExit):
        train_gpt.parse_args(["--num-experts=2", "--top-k=3"])
    args = train_gpt.parse_args(["--preset=gpt_moe_tiny"])
    assert train_gpt.run_name(args) == "gpt_moe_tiny" and train_gpt.expert_overrides(args) == {}
    args = train_gpt.parse_args(["--preset=gpt_moe_tiny", "--num-experts=0"])
    assert train_gpt.run_name(args) == "gpt_moe_tiny_0experts" and train_gpt.expert_overrides(args) == {
        "num_experts": 0}
