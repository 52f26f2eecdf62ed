"""Shared test fixtures: the device the suite runs on, the real data directory (and the `corpora` mark of every test
that needs it), synthetic text and its tokenizer for the tests that need neither, and the checkpoints and runs
several test folders share."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from filelock import FileLock

if TYPE_CHECKING:
    from vaswani.training.summary import RunSummary

REPO_ROOT = Path(__file__).resolve().parents[1]
# The fixtures that hand a test the real data files; a test that asks for one of them (directly or through another
# fixture) is marked `corpora`, so `-m "not corpora"` runs the suite without the shared data.
CORPORA_FIXTURES = ("data_dir", "tweets_csv")


def pick_device() -> torch.device:
    """VASWANI_TEST_DEVICE if set, else CUDA when present, else CPU: the same suite runs on a lent GPU."""
    name = os.environ.get("VASWANI_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@pytest.fixture(scope="session")
def device() -> torch.device:
    return pick_device()


def shared_data_dir() -> Path | None:
    for candidate in (os.environ.get("VASWANI_DATA"), REPO_ROOT.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "multi30k").is_dir():
            return Path(candidate).resolve()  # absolute: tests hand it to processes that start elsewhere
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("real corpora not found: set VASWANI_DATA to the shared data directory")
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in CORPORA_FIXTURES):
            item.add_marker(pytest.mark.corpora)


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A directory that ``build(directory)`` fills once per test session: the first pytest-xdist worker to ask builds
    it, the others wait for it and use the same files. Whoever uses it reads it; a test that changes files changes a
    copy."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    directory, built = root / name, root / f"{name}.built"
    with FileLock(root / f"{name}.lock"):
        if not built.is_file():
            shutil.rmtree(directory, ignore_errors=True)  # a build that failed in another worker
            directory.mkdir()
            build(directory)
            built.touch()
    return directory


@pytest.fixture(scope="session")
def build_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[Path], None]], Path]:
    """``built_once`` for a test module's own session fixtures: build_once(name, build) -> the built directory."""
    return lambda name, build: built_once(tmp_path_factory, name, build)


@pytest.fixture(scope="session", autouse=True)
def _one_thread_in_session_fixtures() -> Iterator[None]:
    """Session fixtures (a training run, a trained checkpoint) are set up before any test's own fixtures: they run on
    one intra-op thread too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tests use tiny models and tiny matmuls: one intra-op thread is faster, and far faster when other processes
    share the cores (idle OpenMP threads spin and fight them). Restored after each test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- synthetic text: what a test that is not about the tokenizer or the corpora translates --------------------------
# Caption-like words of both languages; sentences drawn from them are fast to tokenize, to learn a BPE from, and to
# translate, and need no data files.
GERMAN = """ein eine einem einer einen eines zwei drei mehrere viele einige andere mann frau männer frauen kind kinder
junge mädchen hund hunde katze person leute gruppe menschenmenge zuschauer musiker sänger fährt fahren spielt spielen
läuft laufen steht sitzt sitzen trägt hält schaut geht springt lächelt lacht redet spricht arbeitet kocht isst trinkt
liest schreibt singt tanzt klettert schwimmt wirft fängt schiebt zieht sieht blickt wartet fotografiert posiert baut
malt auf dem der die das den mit und in im am an vor neben sich zu von für bei über unter hinter zwischen durch ihre
seine ihr sein während roten blauen weißen schwarzen grünen gelben orangefarbenen braunen grauen bunten großen kleinen
langen kurzen jungen alten lockigen blonden dunkelhaarige ältere lächelnde park straße straßenecke bürgersteig fahrrad
motorrad auto bus zug boot ball gitarre fußball basketball tennisschläger wasser strand fluss see berg wald feld
himmel sonne regen schnee gras tisch stuhl küche restaurant markt geschäft schaufenster hemd jacke hut brille mütze
kleid rock hose schuhe rucksack tasche kamera telefon zeitung buch stadt gebäude bühne""".split()
ENGLISH = """a an the two three several many some other man woman men women child children boy girl dog dogs cat person
people group crowd spectators musician singer rides ride plays play runs run stands sits sit wears holds looks walks
jumps smiles laughs talks speaks works cooks eats drinks reads writes sings dances climbs swims throws catches pushes
pulls carries sees waits photographs poses builds paints on in with and at of near next to himself herself from for by
over under behind between through their his her its while red blue white black green yellow orange brown gray
colorful big small long short young old curly blond dark-haired older smiling park street corner sidewalk bike
motorcycle car bus train boat ball guitar soccer basketball tennis racket water beach river lake mountain forest field
sky sun rain snow grass table chair kitchen restaurant market shop window shirt jacket hat glasses cap dress skirt
pants shoes backpack bag camera phone newspaper book city building stage""".split()


def synthetic_sentences(words: list[str], n: int, seed: int) -> list[str]:
    """``n`` sentences of 6 to 16 of ``words``, capitalised, ending in a full stop (the same for the same seed)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(6, 16))).capitalize() + "." for _ in range(n)]


@pytest.fixture(scope="session")
def test_pairs() -> tuple[list[str], list[str]]:
    """20 synthetic German sentences and 20 English "references" (aligned by position only: the tests translate
    them with random models)."""
    return synthetic_sentences(GERMAN, 20, seed=1), synthetic_sentences(ENGLISH, 20, seed=2)


@pytest.fixture(scope="session")
def synthetic_tokenizer():
    """A byte-level BPE like the one `prepare` trains, learned in milliseconds from 2,000 synthetic sentences."""
    from vaswani.data.tokenizer import Tokenizer

    texts = synthetic_sentences(GERMAN, 1000, seed=0) + synthetic_sentences(ENGLISH, 1000, seed=0)
    return Tokenizer.train(texts, vocab_size=1000)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, synthetic_tokenizer) -> Path:
    """A random tiny model saved as a whole checkpoint (weights with their fingerprint, model.json, tokenizer.json and
    the manifest), with the synthetic tokenizer."""
    from vaswani.config import ModelConfig
    from vaswani.io import write_manifest
    from vaswani.model import Transformer
    from vaswani.model.serialization import CHECKPOINT_KIND, save_model

    directory = tmp_path_factory.mktemp("tiny_checkpoint")
    torch.manual_seed(0)
    synthetic_tokenizer.save(directory / "tokenizer.json")
    save_model(Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=synthetic_tokenizer.vocab_size)),
               directory, directory / "tokenizer.json")
    write_manifest(directory, CHECKPOINT_KIND)
    return directory


@pytest.fixture
def checkpoint(tmp_path, tiny_checkpoint: Path) -> Path:
    """A private copy of the session's tiny checkpoint, free to damage."""
    import shutil

    return Path(shutil.copytree(tiny_checkpoint, tmp_path / "checkpoint"))


@pytest.fixture
def source_file(tmp_path) -> Path:
    """Two German sentences, one per line, to translate."""
    path = tmp_path / "in.de"
    path.write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen.\n", encoding="utf-8")
    return path


# ---- Multi30k as the tiny runs prepare it ---------------------------------------------------------------------------
TINY_VOCAB = 400  # the BPE of the tests' tiny runs (data.vocab_size)


@pytest.fixture(scope="session")
def prepared_multi30k(tmp_path_factory, data_dir: Path) -> Callable[[Path], Path]:
    """place(workdir): Multi30k train and val encoded with a 400-token BPE, exactly as a run with
    data.vocab_size=400 started in ``workdir`` prepares them, copied into ``workdir``'s runs/data folder; the BPE is
    trained once per session."""
    from vaswani.data.pipeline import default_out_dir, prepare_dataset

    relative = default_out_dir("multi30k", "de-en", TINY_VOCAB)

    def build(root: Path) -> None:
        prepare_dataset("multi30k", splits=("train", "val"), data_dir=data_dir, out_dir=root / relative,
                        vocab_size=TINY_VOCAB)

    prepared = built_once(tmp_path_factory, "prepared_multi30k", build) / relative

    def place(workdir: Path) -> Path:
        return Path(shutil.copytree(prepared, workdir / relative))

    return place


# A finished tiny run whose end chose its final model: 3 evaluations (so averages of 2 and 3 checkpoints), a short
# validation subset and beam 2, so the whole end of the run takes seconds.
FINAL_MODEL_RUN = [
    "train.max_epochs=null", "train.max_steps=12", "train.eval_every_steps=4", "train.bleu_subset=0",
    "train.precision=fp32", "train.progress=false", "train.patience=null", "train.max_tokens=600",
    f"data.vocab_size={TINY_VOCAB}", "train.final_model=true", "train.average_last=3", "train.final_beam=2",
    "train.final_alphas=0.6,1.5", "train.final_valid_sentences=24", "train.final_test_splits=test2016",
]


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, data_dir: Path, prepared_multi30k) -> tuple[Path, RunSummary]:
    """(run directory, summary) of a tiny smoke run trained to its final model, once per session (read it, or copy
    it to change it)."""
    from vaswani.training.summary import RunSummary

    def build(root: Path) -> None:
        from vaswani.training.presets import apply_settings, load_preset
        from vaswani.training.run import train

        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("VASWANI_CACHE", str(root / "cache"))
            patch.chdir(root)
            prepared_multi30k(root)
            config = apply_settings(load_preset("smoke"), FINAL_MODEL_RUN)
            config.data.data_dir = str(data_dir)
            train(config, root / "run")

    run_dir = built_once(tmp_path_factory, "finished_run", build) / "run"
    return run_dir, RunSummary.read(run_dir)


# ---- a trained tiny model: both engines and the exports are checked against it -------------------------------------
# A tiny model *trained* for a few seconds on real Multi30k pairs, so that its outputs are peaked and end in </s> (a
# random model's would run to the length limit and sit near ties), and the real sentences the tests translate: the
# training sources it has nearly learned plus test2016 sentences.
TRAIN_PAIRS = 80  # short ones (< 70 characters each side): two batches of 40
UPDATES = 60  # loss ~0.8: the training sentences are nearly learned
BATCH = 40


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory, data_dir: Path) -> Path:
    """A tiny post-LN model (the paper layout) after 60 AdamW updates on 80 short Multi30k pairs, with its BPE."""
    from vaswani.config import ModelConfig
    from vaswani.data.batching import collate
    from vaswani.data.corpora import load_corpus
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.model import Transformer
    from vaswani.model.serialization import save_model
    from vaswani.training.loss import translation_loss

    directory = tmp_path_factory.mktemp("trained_checkpoint")
    train = load_corpus("multi30k", "train", data_dir=data_dir)
    sources, targets = _short_pairs(train)
    tokenizer = Tokenizer.train(sources + targets, vocab_size=500)
    items = [(i, s, t) for i, (s, t)
             in enumerate(zip(tokenizer.encode_batch(sources), tokenizer.encode_batch(targets)))]
    items.sort(key=lambda item: len(item[1]))  # similar lengths per batch: little padding, fast steps
    batches = [collate(items[start : start + BATCH]) for start in range(0, len(items), BATCH)]
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    for step in range(UPDATES):
        batch = batches[step % len(batches)]
        out = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, label_smoothing=0.0)
        (out.loss_sum / out.n_tokens).backward()
        optimizer.step()
        optimizer.zero_grad()
    save_model(model.eval(), directory)
    tokenizer.save(directory / "tokenizer.json")
    return directory


@pytest.fixture(scope="session")
def sentences(data_dir: Path) -> list[str]:
    """16 training sources (the model's outputs are confident there) and 8 unseen test2016 sources."""
    from vaswani.data.corpora import load_corpus

    train, _ = _short_pairs(load_corpus("multi30k", "train", data_dir=data_dir))
    test = load_corpus("multi30k", "test2016", data_dir=data_dir).source[:8]
    return train[::5] + list(test)


def _short_pairs(corpus) -> tuple[list[str], list[str]]:
    pairs = [(s, t) for s, t in zip(corpus.source[:2000], corpus.target[:2000]) if len(s) < 70 and len(t) < 70]
    pairs = pairs[:TRAIN_PAIRS]
    return [s for s, _ in pairs], [t for _, t in pairs]


@pytest.fixture(scope="session")
def random_checkpoint(trained_checkpoint: Path):
    """make(directory, **model settings): a random tiny model with those settings, saved beside the trained
    checkpoint's tokenizer (equivalence of random weights needs no training)."""
    from vaswani.config import ModelConfig
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.model import Transformer
    from vaswani.model.serialization import save_model

    tokenizer = Tokenizer.load(trained_checkpoint / "tokenizer.json")

    def make(directory: Path, **settings) -> Path:
        torch.manual_seed(0)
        model = Transformer(ModelConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0, **settings))
        directory.mkdir(parents=True, exist_ok=True)
        save_model(model, directory)
        tokenizer.save(directory / "tokenizer.json")
        return directory

    return make
