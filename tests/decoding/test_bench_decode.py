"""`vaswani bench decode` runs end to end on a random tiny model and writes its JSON."""

from __future__ import annotations

import argparse
import json

from vaswani.benchmarks import decode
from vaswani.decoding.compiled import CompiledDecoder


def test_decode_benchmark_smoke(tmp_path, capsys, monkeypatch) -> None:
    # The compiled step is traced by dynamo and run by its "eager" backend: what is checked here is the benchmark's
    # comparison; that torch.compile's code generator decodes like eager is test_translator's --compile test.
    monkeypatch.setattr(decode, "CompiledDecoder", lambda model: CompiledDecoder(model, backend="eager"))
    parser = argparse.ArgumentParser()
    decode.add_arguments(parser)
    out = tmp_path / "decode.json"
    args = parser.parse_args(["--preset", "tiny", "--sentences", "6", "--batch-size", "3", "--beams", "2",
                              "--output-len", "6", "--uncached-sentences", "3", "--single-sentences", "2",
                              "--device", "cpu", "--repeats", "1", "--compile", "--out", str(out)])
    assert decode.run(args) == 0
    assert "KV cache" in capsys.readouterr().out
    report = json.loads(out.read_text())
    names = [row["name"] for row in report["results"]]
    assert names[:2] == ["greedy", "beam 2"] and "beam 2 one sentence at a time" in names
    for row in report["results"]:
        assert row["tokens"] == row["sentences"] * 6  # random model: </s> disabled, fixed output length
        assert row["sentences_per_s"] > 0 and row["tokens_per_s"] > 0
    assert set(report["comparisons"]) == {"cache_speedup", "cache_speedup_decoder_only",
                                          "batched_beam_speedup_per_sentence", "preallocated_cache_speedup",
                                          "attention_backend", "compiled_step"}
    backends = report["comparisons"]["attention_backend"]
    assert (backends["model"], backends["other"]) == ("sdpa", "standard")
    assert set(backends["own_speedup"]) == {"greedy", "beam 2"} and min(backends["own_speedup"].values()) > 0
    assert {"greedy, sdpa attention (the model's)", "beam 2, standard attention"} <= set(names)
    table = out.with_suffix(".md").read_text()
    assert "The model's sdpa attention vs the same weights with standard attention" in table
    assert set(report["comparisons"]["preallocated_cache_speedup"]) == {"greedy", "beam 2"}
    assert "caches grown per step (default)" in out.with_suffix(".md").read_text()
    compiled = report["comparisons"]["compiled_step"]
    assert set(compiled["speedup"]) == set(compiled["first_pass_seconds"]) == {"greedy", "beam 2"}
    assert {"greedy, compiled decoding step", "beam 2, eager"} <= set(names)
    assert "Compiled decoding step (`torch.compile`) vs eager" in table
    assert {"platform", "cpu_count", "torch", "device_name"} <= set(report["hardware"])
