"""`vaswani clean`, as a user types it: each rule drops exactly the pairs it names, counted and shown in the
report; the kept pairs are written in order under the input files' names; bad input and an empty result are
one line each with nothing written; and no output reaches an input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from vaswani.cli import main
from vaswani.data.cleaning import ScriptCheck, script_of

GOOD = [(f"Ein Hund läuft {i} Mal über die Wiese.", f"A dog runs across the meadow {i} times.")
        for i in range(20)]
NOISE = {
    "empty": ("", "A source that is missing."),
    "too_long": ("Ein sehr langer Satz. " * 20, "A very long sentence. " * 20),
    "length_ratio": ("Ja.", "Yes, and this target goes on and on far longer than its source."),
    "source_equals_target": ("Berlin 2016", "Berlin 2016"),
    "foreign_script": ("Собака бежит по лугу.", "A dog runs across the meadow."),
    "duplicate_pair": GOOD[3],
    "duplicate_source": (GOOD[5][0], "Another translation of the fifth sentence."),
}


def write_corpus(folder: Path, pairs: list[tuple[str, str]], stem: str = "corpus") -> tuple[Path, Path]:
    source, target = folder / f"{stem}.de", folder / f"{stem}.en"
    source.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    target.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return source, target


def clean(capsys, *argv) -> tuple[int, str, str]:
    code = main(["clean", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


ALL_RULES = ["--max-chars", "200", "--max-ratio", "3", "--scripts", "--duplicate-sources"]


def test_each_rule_drops_its_pairs_counts_them_and_shows_them(tmp_path, capsys):
    noisy = list(NOISE.values())
    source, target = write_corpus(tmp_path, GOOD + noisy)
    code, out, err = clean(capsys, "--src", source, "--tgt", target, "--out", tmp_path / "clean", *ALL_RULES)
    assert code == 0, err

    kept = tmp_path / "clean"
    assert (kept / "corpus.de").read_text(encoding="utf-8").splitlines() == [s for s, _ in GOOD]
    assert (kept / "corpus.en").read_text(encoding="utf-8").splitlines() == [t for _, t in GOOD]
    report = json.loads((kept / "report.json").read_text(encoding="utf-8"))
    assert report["pairs"] == len(GOOD) + len(NOISE) and report["kept"] == len(GOOD)
    assert report["languages"]["source"] == "de" and report["outputs"] == [str(kept / "corpus.de"),
                                                                          str(kept / "corpus.en")]
    assert [rule["rule"] for rule in report["rules"]] == list(NOISE)  # every rule, in the order tried
    for line, (rule, pair) in enumerate(NOISE.items(), start=len(GOOD) + 1):
        result = next(result for result in report["rules"] if result["rule"] == rule)
        assert result["dropped"] == 1
        assert result["examples"] == [{"line": line, "source": pair[0], "target": pair[1]}]
    assert "kept 20 (74.1 %)" in out and "foreign_script" in (kept / "report.txt").read_text(encoding="utf-8")
    assert json.loads((kept / "vaswani.json").read_text())["kind"] == "cleaned corpus"


def test_by_default_only_empty_sides_duplicate_pairs_and_copies_are_dropped(tmp_path, capsys):
    source, target = write_corpus(tmp_path, GOOD + list(NOISE.values()))
    code, _, err = clean(capsys, "--src", source, "--tgt", target, "--out", tmp_path / "clean")
    assert code == 0, err
    report = json.loads((tmp_path / "clean" / "report.json").read_text(encoding="utf-8"))
    assert {rule["rule"]: rule["dropped"] for rule in report["rules"]} == {
        "empty": 1, "source_equals_target": 1, "duplicate_pair": 1}
    assert report["kept"] == len(GOOD) + 4


def test_a_gzip_tsv_corpus_is_written_back_as_one_tsv_file(tmp_path, capsys):
    tsv = tmp_path / "pairs.tsv.gz"
    with gzip.open(tsv, "wt", encoding="utf-8") as handle:
        handle.writelines(f"{s}\t{t}\n" for s, t in GOOD + [GOOD[0], GOOD[1]])
    code, _, err = clean(capsys, "--tsv", tsv, "--out", tmp_path / "clean", "--examples", "1")
    assert code == 0, err
    written = (tmp_path / "clean" / "pairs.tsv").read_text(encoding="utf-8")
    assert written == "".join(f"{s}\t{t}\n" for s, t in GOOD)
    rules = json.loads((tmp_path / "clean" / "report.json").read_text())["rules"]
    duplicates = next(rule for rule in rules if rule["rule"] == "duplicate_pair")
    assert duplicates["dropped"] == 2 and len(duplicates["examples"]) == 1


def _mismatched(folder: Path) -> list[str]:
    source, target = write_corpus(folder, GOOD)
    target.write_text("only one line\n", encoding="utf-8")
    return ["--src", str(source), "--tgt", str(target)]


def _invalid_utf8(folder: Path) -> list[str]:
    source, target = write_corpus(folder, GOOD)
    source.write_bytes(source.read_bytes() + b"caf\xe9\n")
    target.write_text(target.read_text() + "coffee\n", encoding="utf-8")
    return ["--src", str(source), "--tgt", str(target)]


def _all_dropped(folder: Path) -> list[str]:
    source, target = write_corpus(folder, [("Berlin", "Berlin"), ("Paris", "Paris")])
    return ["--src", str(source), "--tgt", str(target)]


def _unknown_script(folder: Path) -> list[str]:
    source, target = write_corpus(folder, GOOD)
    return ["--src", str(source), "--tgt", str(target), "--src-lang", "xq", "--tgt-lang", "en", "--scripts"]


@pytest.mark.parametrize("make, expected", [
    (_mismatched, "has 20 lines but"),
    (_invalid_utf8, "corpus.de:21: invalid UTF-8"),
    (_all_dropped, "no pair is left after cleaning (source_equals_target dropped 2 of 2)"),
    (_unknown_script, "does not know the scripts of language 'xq'"),
])
def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, capsys, make, expected):
    argv = make(tmp_path)
    code, _, err = clean(capsys, *argv, "--out", tmp_path / "clean")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "clean").exists()


def test_no_output_reaches_an_input(tmp_path, capsys):
    source, target = write_corpus(tmp_path, GOOD)
    before = source.read_bytes()
    for out in (tmp_path, source, source / "inside"):
        code, _, err = clean(capsys, "--src", source, "--tgt", target, "--out", out)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert source.read_bytes() == before
    code, _, err = clean(capsys, "--src", source, "--tgt", target, "--out", tmp_path / "clean")
    assert code == 0, err
    code, _, err = clean(capsys, "--src", source, "--tgt", target, "--out", tmp_path / "clean")
    assert code == 2 and "--force" in err  # an earlier result is replaced only when asked
    assert clean(capsys, "--src", source, "--tgt", target, "--out", tmp_path / "clean", "--force")[0] == 0


def test_scripts_are_read_from_unicode_names():
    assert [script_of(c) for c in "aßЖλ中かカ한ａ1 ,"] == [
        "LATIN", "LATIN", "CYRILLIC", "GREEK", "CJK", "HIRAGANA", "KATAKANA", "HANGUL", "LATIN",
        None, None, None]
    german, japanese = ScriptCheck("de", "source"), ScriptCheck("ja", "target")
    assert german.share("Über 3 Brücken!") == 1.0
    assert german.share("Hund Собака") == pytest.approx(4 / 10)
    assert japanese.share("犬が走る") == 1.0 and japanese.share("A dog runs") == 0.0
    assert german.share("123 ...") == 1.0  # no letters: nothing to hold against it


# ---- the language rule (py3langid, an optional extra) ---------------------------------------------------------------
WRONG_LANGUAGE = [("A dog runs across the meadow.", "Ein Hund läuft über die Wiese."),  # the sides swapped
                  ("Un chien court dans le pré vert.", "A dog runs across the green meadow.")]  # French, not German
UNSURE = [("Zwei Männer", "Two men")]  # a few words the model guesses other languages for, unsure: kept


def test_the_language_rule_drops_pairs_with_a_side_in_another_language_and_keeps_unsure_guesses(tmp_path, capsys):
    pytest.importorskip("py3langid")
    source, target = write_corpus(tmp_path, GOOD + WRONG_LANGUAGE + UNSURE)
    code, out, err = clean(capsys, "--src", source, "--tgt", target, "--out", tmp_path / "clean", "--language-id")
    assert code == 0, err
    kept = (tmp_path / "clean" / "corpus.de").read_text(encoding="utf-8").splitlines()
    assert kept == [s for s, _ in GOOD + UNSURE]
    report = json.loads((tmp_path / "clean" / "report.json").read_text(encoding="utf-8"))
    result = next(result for result in report["rules"] if result["rule"] == "wrong_language")
    assert result["dropped"] == 2 and [example["line"] for example in result["examples"]] == [21, 22]
    assert report["settings"]["min_language_confidence"] == 0.5
    assert "wrong_language" in out and "line 22: 'Un chien court" in out

    code, _, err = clean(capsys, "--src", source, "--tgt", target, "--out", tmp_path / "sure", "--language-id",
                         "--min-language-confidence", "0.995")  # only the surest guesses drop a pair
    report = json.loads((tmp_path / "sure" / "report.json").read_text(encoding="utf-8"))
    # the model is 0.997 sure of the swapped pair's German, 0.992 of the French sentence: that one is kept now
    assert code == 0 and next(r for r in report["rules"] if r["rule"] == "wrong_language")["dropped"] == 1, err


def test_the_language_rule_without_its_package_or_for_a_language_it_lacks_is_one_line(tmp_path, capsys,
                                                                                      monkeypatch):
    from vaswani.data import language_id

    source, target = write_corpus(tmp_path, GOOD)
    monkeypatch.setitem(__import__("sys").modules, "py3langid", None)  # as if it were not installed
    monkeypatch.setitem(__import__("sys").modules, "py3langid.langid", None)
    language_id._identifier.cache_clear()
    code, _, err = clean(capsys, "--src", source, "--tgt", target, "--out", tmp_path / "clean", "--language-id")
    language_id._identifier.cache_clear()
    assert code == 2 and "needs the py3langid package" in err and "vaswani[langid]" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "clean").exists()

    monkeypatch.undo()
    pytest.importorskip("py3langid")
    code, _, err = clean(capsys, "--src", source, "--tgt", target, "--src-lang", "tlh", "--tgt-lang", "en", "--out",
                         tmp_path / "clean", "--language-id")
    assert code == 2 and "py3langid does not know language 'tlh'" in err, err
    assert not (tmp_path / "clean").exists()
