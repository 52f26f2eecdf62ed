"""The row the corpus studies share: a variant's mean BLEU over its seeds and their spread, as results.json and
table.md hold it."""

from __future__ import annotations

from vaswani.experiments.corpus_studies import VariantResult, summarize_variants, variants_table


def test_a_row_is_the_mean_and_spread_of_its_seeds_in_the_order_the_variants_first_come() -> None:
    rows = summarize_variants([VariantResult("half", 0, {"test2016": 30.0, "test2017": 20.0}),
                               VariantResult("all", 0, {"test2016": 35.0, "test2017": 25.0}),
                               VariantResult("half", 1, {"test2016": 32.0, "test2017": 21.0})])
    first = rows[0].to_json()
    assert list(first.items()) == [("variant", "half"), ("seeds", 2), ("test2016", 31.0), ("test2016_spread", 2.0),
                                   ("test2017", 20.5), ("test2017_spread", 1.0)]
    assert rows[1].to_json()["variant"] == "all" and rows[1].to_json()["test2017_spread"] is None  # one seed
    table = variants_table(rows, "forward model")
    assert table.splitlines()[0] == ("| forward model | seeds | test2016 BLEU | test2017 BLEU | test2016 spread | "
                                     "test2017 spread |")
    assert "| half | 2 | 31.00 | 20.50 | 2.00 | 1.00 |" in table
    assert "| all | 1 | 35.00 | 25.00 | – | – |" in table
    without_spread = variants_table(rows, "model", False, {"speed": ["1", "2"]}).splitlines()
    assert without_spread[0].endswith("| test2017 BLEU | speed |")
    assert without_spread[-1] == "| all | 1 | 35.00 | 25.00 | 2 |"
