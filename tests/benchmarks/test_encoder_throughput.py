"""benchmarks/encoder_throughput.py: its flags and its table (the timing itself is a benchmark)."""

import argparse

import pytest

from benchmarks import encoder_throughput


def test_bad_malloc_flag_names_the_flag_and_the_value(capsys):
    with pytest.raises(SystemExit):
        encoder_throughput.main(["--malloc", "keep,jemalloc"])
    assert "--malloc: unknown ['jemalloc']" in capsys.readouterr().err


def test_report_has_a_row_per_malloc_setting():
    args = argparse.Namespace(rounds=3, steps=10, warmup=2, configs=["medium"])
    results = [{"backend": "jax", "malloc": malloc, "peak_gflops": 200.0,
                "rows": [{"config": "medium", "impl": impl, "examples_per_s": rate * scale, "gflops": 50.0 * scale}
                         for impl, rate in (("kformer", 11.0), ("plain_keras", 11.0), ("keras_hub", 10.0))]}
               for malloc, scale in (("default", 1.0), ("keep", 1.4))]
    table = encoder_throughput.report(results, args).splitlines()
    assert table[2].startswith("| backend | malloc | config |")
    assert table[4] == "| jax | default | medium | 11.0 | 11.0 | 10.0 | 1.00x | 1.10x | 50.0 (25% of 200) |"
    assert table[5] == "| jax | keep | medium | 15.4 | 15.4 | 14.0 | 1.00x | 1.10x | 70.0 (35% of 200) |"
