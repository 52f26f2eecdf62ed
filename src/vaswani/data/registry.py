"""The registered datasets (Multi30k, WMT17, IWSLT16): each split lists its (German, English) file pairs, with the
public URL and sha256 of every file, so the same name works offline (``--data-dir`` / ``VASWANI_DATA``) and online
(downloaded once into a cache, see ``download.py``). Direction is a setting: ``de-en`` (default) or ``en-de`` just
swaps which side is the source; the user's own files (dataset ``local``) may be any language pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vaswani.data.download import RemoteFile
from vaswani.errors import ConfigError, DataError

DIRECTIONS = ("de-en", "en-de")  # of the registered datasets; the user's own files may be any language pair
LOCAL = "local"  # the dataset name of the user's own files

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
WMT_URL = "https://raw.githubusercontent.com/Helsinki-NLP/OPUS-MT-testsets/master/testsets/de-en"
IWSLT_URL = (
    "https://raw.githubusercontent.com/gugundi/NeuralMachineTranslation/"
    "1b51a63297e25428ec8243cb04571eb9bd50da97/.data/iwslt/de-en"
)
# The WMT17 de-en training data (News Commentary v12, Europarl v7, Common Crawl, Rapid 2016; ~5.9M pairs): local
# copies of the files its archives unpack to, in DATA/wmt17_de_en/train/ (plain or .gz), else the HF hub's copy.
WMT17_TRAIN_DIR = "wmt17_de_en/train"
WMT17_TRAIN_FILES = ("europarl-v7.de-en", "commoncrawl.de-en", "news-commentary-v12.de-en", "rapid2016.de-en")
WMT17_HUB_ID = "wmt/wmt17"  # the hub's parquet copy of WMT17: `datasets` runs no loading scripts
WMT17_HUB_CONFIG = "de-en"


@dataclass(frozen=True)
class SplitSpec:
    name: str
    parts: tuple[tuple[RemoteFile, RemoteFile], ...]  # (German file, English file) pairs, concatenated in order
    hub: bool = False  # read from the Hugging Face hub instead of files (WMT17 train)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    splits: dict[str, SplitSpec]
    aliases: dict[str, str]  # e.g. "val" -> "newstest2016"
    default_vocab_size: int
    missing: dict[str, str] = field(default_factory=dict)  # split names that do not exist, and why

    def split_names(self) -> list[str]:
        return list(self.splits) + [f"{alias} (= {target})" for alias, target in self.aliases.items()]

    def resolve_split(self, split: str) -> SplitSpec:
        name = self.aliases.get(split, split)
        if name in self.splits:
            return self.splits[name]
        if split in self.missing:
            raise DataError(f"dataset {self.name!r} has no {split!r} split: {self.missing[split]}")
        raise DataError(
            f"dataset {self.name!r} has no split {split!r}; valid splits: {', '.join(self.split_names())}"
        )


def _pair(base_url: str, de: tuple[str, str], en: tuple[str, str], folder: str, sub: str = "") -> tuple:
    """(RemoteFile de, RemoteFile en) from (file name, sha256) pairs; the URL uses the bare file name."""
    local = f"{folder}/{sub}" if sub else folder
    return tuple(RemoteFile(f"{local}/{name}", f"{base_url}/{name}", sha) for name, sha in (de, en))


def _multi30k() -> DatasetSpec:
    sha = {  # from shared/data/multi30k/SOURCE.md
        "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
        "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
        "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
        "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
        "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
        "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    }
    stems = {"train": "train", "val": "val", "test2016": "test_2016_flickr", "test2017": "test_2017_flickr"}
    splits = {}
    for split, stem in stems.items():
        de, en = f"{stem}.de.gz", f"{stem}.en.gz"
        splits[split] = SplitSpec(split, (_pair(MULTI30K_URL, (de, sha[de]), (en, sha[en]), "multi30k"),))
    return DatasetSpec(
        name="multi30k",
        description="Multi30k task 1: image captions, 29k train pairs",
        splits=splits,
        aliases={"test": "test2016"},
        default_vocab_size=8000,
    )


def _wmt17() -> DatasetSpec:
    sha = {  # from shared/data/wmt17_de_en/SOURCE.md
        "newstest2016": ("738ca1ced4099937127be3208ba70d46e7a93550cd57cfd645f3d35e0e52a254",
                         "cd5c112a358d9c99b9557eb358e16d7a94f8fa93ad7aa61bf5f1141f2e1f8854"),
        "newstest2017": ("675e4f7e6045dacf56507e29b24106d771a571e0eb58d822806b086cdcf892f4",
                         "11adaec47477928dab9cb3fc9279d99dbbbfec7161f3abf6fddd759668fcd703"),
        "news-test2008": ("6d86c805e6cd008c11143816daac272fdf5a3afea816983c43005717d6fe3ae2",
                          "134e1140848bb0d05e774dbe35b8b69602faf401250c03dbb437bdbe38c37b6f"),
        "newstest2009": ("c3a23d90e89c080cd3257a23365187e91939be4067176861fb88df7f61864b40",
                         "3fc92718e7b994ca0a5dc57e63b68d5c80244a56e5bb1cec11d2e8dd10b3ff3c"),
        "newstest2010": ("4f4b02d3abe150ca47a745d138d90f688edb20dd2d2fedca16aa05fd1e2018b1",
                         "1ebece77e333965cbc66fde735a6f17e026b4d6690f4f7fdaba839b7bdadac3b"),
        "newstest2011": ("033bc05659f61c5e51170973267d21e23a9a968557b866f3842c92e416a60e1b",
                         "d387569743c0fa9097df4d4e2c1dd9e6ba9ef3cee6e0f473da3204c887dcf8fd"),
        "newstest2012": ("946b9587b79271b0f3ce9cc8c0e5b310e3021ef598e1ba5dc2a24fef8960de30",
                         "f9e51f85c4948033fc7d77ef427f4d88908a8dd3f778970f62d0baafac3ff97e"),
        "newstest2013": ("d7ea35ab91ff3709e03ad9cb6bf5b4f2cc775cd2d72efd5254c4aec5e69663ca",
                         "ace268a1d9724ca76f6d8e5c720ffdc08f01bdce45630ed8b269dc7918e1c16e"),
        "newstest2014": ("ae5d110486bc33d7175e9e28c7d0051eb3e5fcd2166dd93371089852c091a20e",
                         "7294bccf2879a97b3706b95c9595f1459617a8ee7130d5d8581c910e69736971"),
        "newstest2015": ("796cce52ab248469187b60f60715a738a0b92944dc010a69a0083de7fae1b513",
                         "422fbb5a274c7aae1a0890381cd4516307ca7bc957604220d4871a91664121e5"),
    }
    extra = ["news-test2008"] + [f"newstest{year}" for year in range(2009, 2016)]

    def pair(name: str) -> tuple:
        sub = "dev_extra" if name in extra else ""
        return _pair(WMT_URL, (f"{name}.de", sha[name][0]), (f"{name}.en", sha[name][1]), "wmt17_de_en", sub)

    splits = {name: SplitSpec(name, (pair(name),)) for name in sha}
    # The older test sets WMT17 ships as dev data double as a small (21,243 pairs) in-domain training set.
    splits["train-extra"] = SplitSpec("train-extra", tuple(pair(name) for name in extra))
    splits["train"] = SplitSpec("train", (), hub=True)
    return DatasetSpec(
        name="wmt17",
        description="WMT17 news: newstest2016 (val), newstest2017 (test), older test sets, train from local copies or "
                    "HF datasets",
        splits=splits,
        aliases={"val": "newstest2016", "dev": "newstest2016", "test": "newstest2017", "newstest2008": "news-test2008"},
        default_vocab_size=50_000,
    )


def _iwslt() -> DatasetSpec:
    sha = {  # from shared/data/iwslt16_de_en/SOURCE.md
        "TED.dev2010": ("9f2c2a4487cd329d22cb440f303920e1d368cf04c4c6e974b56149548991f6ea",
                        "56989441a1a503e0718a592b31a152b944bfd707d1ee1f9305de8caf88ce9e60"),
        "TED.tst2010": ("3ed4c594f00ec3052b58325218142db800e671cc5d14331254e41ebfe42d56d8",
                        "f60a0923afe861dff8be62986c4a239bfd09eee3183ad9d17af1b6d363d0ddae"),
        "TED.tst2011": ("605877ad3a8c612344f6544c77a2cbcae0ab8f73dc9dca9c041a04e2703e2bab",
                        "84e1e460256adfd142e9c7faf9c036d98ead475218b59784069ec3790ea16444"),
        "TED.tst2012": ("9f81bb3ca9e15c40c3af665d582b0aaf8a447d01d54cb02db2eda06a5b4d1ad6",
                        "1e5b82072b5947a188c669a18ee7d15cac38a75e5c2d2d9ac75efe3e911cc4b3"),
        "TED.tst2013": ("60fa902b0bf558ff58cf38de1dc6941de706e9f58e33e92119eb64696df4bbcc",
                        "9fc2d5df75a05754427a5dcea1b3cc2456e8613c878527e56713978a13bf672e"),
        "TED.tst2014": ("66aa2e5c16a1c0e04b6c58e263e448edb6992f639736b57daf5c26733140c928",
                        "e82bfa58d4a170573826999a4852c496162a229f405eb488b3d6d385dbabcbaa"),
        "TEDX.dev2012": ("5aac685d776bf1bfbd6a7694923e66b9fb3ccbb9575d5cba2468ca661510144b",
                         "2cec1ad8e057ddeaf4028d0d8dd146bedb865e535ed3b1584ac5b1bcada6a9b8"),
        "TEDX.tst2013": ("3ad948be62b7d3e76234f078e9a113b72a556c3613b385a79c5bd24fa530fab6",
                         "d00a11ec660025647227a612a4e4e738418437bcb5d2e2edcb131273f06b3d7f"),
        "TEDX.tst2014": ("24388aeba244b8e5643d15156234a708deb58b0d4d5de738f1f5543627cf00c6",
                         "051be709c7ba1ccd521f7949af334022c12616fdd90eee29d49405ecf928862a"),
    }
    splits = {}
    for key, (sha_de, sha_en) in sha.items():
        kind, set_name = key.split(".")
        split = set_name if kind == "TED" else f"tedx-{set_name}"
        de, en = f"IWSLT16.{key}.de-en.de", f"IWSLT16.{key}.de-en.en"
        splits[split] = SplitSpec(split, (_pair(IWSLT_URL, (de, sha_de), (en, sha_en), "iwslt16_de_en"),))
    return DatasetSpec(
        name="iwslt",
        description="IWSLT16 TED talks: official dev/test sets only",
        splits=splits,
        aliases={"val": "tst2013", "dev": "tst2013", "test": "tst2014"},
        default_vocab_size=16_000,
        missing={
            "train": "the IWSLT16 TED training set is not available (only the official dev/test sets are); "
            "train on another dataset, or pass a local training corpus with --src/--tgt or --tsv"
        },
    )


DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in (_multi30k(), _wmt17(), _iwslt())}
DEFAULT_DATASET = "multi30k"
DEFAULT_VOCAB_SIZE = 16_000  # for datasets without their own default, e.g. local files


def get_dataset(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}; valid datasets: {', '.join(DATASETS)}, or {LOCAL} (your own "
                        "files: --src/--tgt or --tsv)")
    return DATASETS[name]


def default_vocab_size(dataset: str | None) -> int:
    """The dataset's own default, or DEFAULT_VOCAB_SIZE (the user's files)."""
    return DATASETS[dataset].default_vocab_size if dataset in DATASETS else DEFAULT_VOCAB_SIZE


def parse_direction(direction: str) -> tuple[str, str]:
    if direction not in DIRECTIONS:
        raise ConfigError(f"direction {direction!r} is not one of {list(DIRECTIONS)}")
    src, tgt = direction.split("-")
    return src, tgt
