"""Reading the Penn Treebank: split ranges, layouts, nltk's path sandbox, malformed files, the sample download."""

from __future__ import annotations

import zipfile
from pathlib import Path

import nltk
import pytest
from nltk.corpus.reader import BracketParseCorpusReader
from seqxduce_parsing import treebank
from seqxduce_parsing.settings import PtbSettings
from seqxduce_parsing.task import PtbTask

from seqxduce.api import UserError

TWO_TREES = """( (S
    (NP-SBJ (NNP Mr.) (NNP Vinken) )
    (VP (VBZ is)
      (NP-PRD (NN chairman) ))
    (. .) ))
( (S
    (NP-SBJ (PRP He) )
    (VP (VBD left) )
    (. .) ))
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- ranges and layouts


def test_parse_ranges_expands_ranges_and_single_files():
    assert treebank.parse_ranges("0001-0003, 0007", "train_files") == [1, 2, 3, 7]
    assert treebank.parse_ranges("2300", "test_files") == [2300]


@pytest.mark.parametrize("text", ["1-3", "0003-0001", "02-21", "abc"])
def test_parse_ranges_rejects_bad_ranges_naming_the_key(text):
    with pytest.raises(UserError, match=r"\[task\] train_files"):
        treebank.parse_ranges(text, "train_files")


def test_flat_split_finds_the_sample_files(ptb_sample):
    root, ids = treebank.split_files(ptb_sample, "0160-0179", "flat", "valid_files")
    assert root == ptb_sample
    assert ids == [f"wsj_{n:04d}.mrg" for n in range(160, 180)]


def test_ldc_layout_is_detected_and_gaps_in_ranges_are_skipped(tmp_path):
    write(tmp_path / "wsj" / "02" / "wsj_0200.mrg", TWO_TREES)
    write(tmp_path / "wsj" / "02" / "wsj_0203.mrg", TWO_TREES)
    write(tmp_path / "wsj" / "23" / "wsj_2300.mrg", TWO_TREES)
    assert treebank.detect_layout(tmp_path) == "ldc"
    root, ids = treebank.split_files(tmp_path, "0200-2199", "auto", "train_files")
    assert root == tmp_path / "wsj"
    assert ids == ["02/wsj_0200.mrg", "02/wsj_0203.mrg"]
    assert len(treebank.read_split(tmp_path, "2300-2399", "ldc", "test_files")) == 2


def test_wrong_directory_is_a_user_error_naming_it(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(UserError, match="nowhere: no such directory"):
        treebank.split_files(missing, "0001", "flat", "train_files")
    write(tmp_path / "flat" / "wsj_0001.mrg", TWO_TREES)
    with pytest.raises(UserError, match=r"train_files = '0500-0501': no .mrg file"):
        treebank.split_files(tmp_path / "flat", "0500-0501", "flat", "train_files")


# ---------------------------------------------------------------- reading


def test_reads_the_sample_dev_split_with_the_empty_root_dropped(ptb_sample):
    trees = treebank.read_split(ptb_sample, "0160-0179", "flat", "valid_files")
    assert len(trees) == 273  # as shared/evalb_reference/gold.mrg
    assert trees[0].label() == "S"
    assert trees[0].leaves()[:3] == ["Savin", "Corp.", "reported"]


def test_read_trees_authorizes_the_directory_for_nltk(tmp_path):
    write(tmp_path / "wsj_0001.mrg", TWO_TREES)
    trees = treebank.read_trees(tmp_path, ["wsj_0001.mrg"])
    assert [t.leaves() for t in trees] == [["Mr.", "Vinken", "is", "chairman", "."], ["He", "left", "."]]
    assert str(tmp_path.resolve()) in nltk.data.path


def test_missing_close_bracket_names_file_and_line_of_the_tree(tmp_path):
    bad = TWO_TREES.replace("(NN chairman) ))", "(NN chairman) )")
    path = write(tmp_path / "wsj_0001.mrg", bad)
    with pytest.raises(UserError, match=r"wsj_0001\.mrg:1: tree has 1 unclosed bracket\(s\) when the next tree "
                                        r"starts at line 6"):
        treebank.read_trees(tmp_path, ["wsj_0001.mrg"])
    assert path.exists()


def test_missing_close_bracket_in_the_last_tree_names_its_line(tmp_path):
    write(tmp_path / "wsj_0001.mrg", TWO_TREES.rstrip().removesuffix(")"))
    with pytest.raises(UserError, match=r"wsj_0001\.mrg:6: tree has 1 unclosed bracket\(s\) at the end"):
        treebank.check_trees(tmp_path / "wsj_0001.mrg")


def test_extra_close_bracket_names_its_line_and_column(tmp_path):
    write(tmp_path / "wsj_0001.mrg", TWO_TREES.replace("(VBD left) )", "(VBD left) )))"))
    with pytest.raises(UserError, match=r"wsj_0001\.mrg:9:\d+: '\)' closes no open bracket"):
        treebank.check_trees(tmp_path / "wsj_0001.mrg")


def test_text_between_trees_is_an_error(tmp_path):
    write(tmp_path / "wsj_0001.mrg", TWO_TREES.replace("( (S\n    (NP-SBJ (PRP", "oops\n( (S\n    (NP-SBJ (PRP"))
    with pytest.raises(UserError, match=r"wsj_0001\.mrg:6:1: text outside a tree"):
        treebank.check_trees(tmp_path / "wsj_0001.mrg")


def test_a_well_formed_file_counts_its_trees(ptb_sample):
    assert len(treebank.check_trees(ptb_sample / "wsj_0001.mrg")) == 2


# ---------------------------------------------------------------- download


def fake_download(files: dict[str, str], zipped: bool, ok: bool = True):
    """A stand-in for nltk's Downloader.download that writes the package as nltk would, offline."""
    calls = []

    def download(self, info_or_id=None, download_dir=None, quiet=False, **kwargs):
        calls.append((info_or_id, download_dir))
        if not ok:
            return False
        corpora = Path(download_dir) / "corpora"
        corpora.mkdir(parents=True)
        if zipped:
            with zipfile.ZipFile(corpora / "treebank.zip", "w") as zf:
                zf.writestr("treebank/README", "sample")
                for name, text in files.items():
                    zf.writestr(f"treebank/combined/{name}", text)
        else:
            for name, text in files.items():
                write(corpora / "treebank" / "combined" / name, text)
        return True

    return download, calls


@pytest.mark.parametrize("zipped", [True, False])
def test_download_sample_copies_the_mrg_files_and_cleans_up(tmp_path, monkeypatch, zipped):
    import nltk.downloader

    download, calls = fake_download({"wsj_0001.mrg": TWO_TREES, "wsj_0002.mrg": TWO_TREES}, zipped)
    monkeypatch.setattr(nltk.downloader.Downloader, "download", download)
    target = tmp_path / "ptb"
    treebank.download_sample(target)
    assert calls[0][0] == "treebank"
    assert sorted(p.name for p in target.iterdir()) == ["wsj_0001.mrg", "wsj_0002.mrg"]
    assert len(treebank.read_split(target, "0001-0002", "flat", "train_files")) == 4


def test_failed_download_is_a_user_error(tmp_path, monkeypatch):
    import nltk.downloader

    download, _ = fake_download({}, zipped=False, ok=False)
    monkeypatch.setattr(nltk.downloader.Downloader, "download", download)
    with pytest.raises(UserError, match="could not download the NLTK treebank sample"):
        treebank.download_sample(tmp_path / "ptb")


def test_prepare_downloads_only_when_no_treebank_is_there(tmp_path, monkeypatch):
    import nltk.downloader

    download, calls = fake_download({"wsj_0001.mrg": TWO_TREES}, zipped=True)
    monkeypatch.setattr(nltk.downloader.Downloader, "download", download)
    task = PtbTask(PtbSettings())
    task.prepare(tmp_path / "ptb")
    task.prepare(tmp_path / "ptb")
    assert len(calls) == 1
    write(tmp_path / "own" / "wsj_0001.mrg", TWO_TREES)
    task.prepare(tmp_path / "own")
    assert len(calls) == 1


def test_prepare_never_downloads_for_the_ldc_layout(tmp_path):
    with pytest.raises(UserError, match="licensed by the LDC"):
        PtbTask(PtbSettings(layout="ldc")).prepare(tmp_path)


# ---------------------------------------------------------------- malformed trees with balanced brackets


@pytest.mark.parametrize("old, new, where", [
    # (a) a bare word among constituents; nltk keeps it as a string child and linearize crashed on it
    ("(NP-SBJ (PRP He) )", "(NP-SBJ (PRP He) ) stray", r":7: word 'stray' stands among the constituents of \(S"),
    # (b) two words under one tag; nltk's reader silently rewrites (PRP He she) to (PRP He)
    ("(PRP He)", "(PRP He she)", r":7: \(PRP He she \.\.\.\) has more than one word"),
    # (c) an empty preterminal; nltk reads an empty Tree that preprocessing silently dropped
    ("(PRP He)", "(PRP)", r":7: \(PRP\) holds no word and no bracket"),
    ("(PRP He)", "()", r":7: \(\) holds no word"),
    ("(NP-SBJ (PRP He) )", "(NP-SBJ He (PRP he) )", r":7: \(NP-SBJ He \.\.\.\) mixes a word with brackets"),
    ("(NP-SBJ (PRP He) )", "( (PRP He) )", r":7: a bracket without a label inside a tree"),
])
def test_malformed_trees_with_balanced_brackets_name_file_and_line(tmp_path, old, new, where):
    write(tmp_path / "wsj_0001.mrg", TWO_TREES.replace(old, new))
    task = PtbTask(PtbSettings(train_files="0001"))
    with pytest.raises(UserError, match=r"wsj_0001\.mrg" + where + ".*; "):
        task.examples("train", tmp_path)


def test_a_multiline_empty_bracket_is_reported_at_its_opening_line(tmp_path):
    write(tmp_path / "wsj_0001.mrg", TWO_TREES.replace("(NP-PRD (NN chairman) ))", "(NP-PRD (NN\n chairman) ))"))
    assert len(treebank.check_trees(tmp_path / "wsj_0001.mrg")) == 2
    write(tmp_path / "wsj_0001.mrg", TWO_TREES.replace("(NP-PRD (NN chairman) ))", "(NP-PRD (NN\n ) ))"))
    with pytest.raises(UserError, match=r"wsj_0001\.mrg:4: \(NN\) holds no word"):
        treebank.check_trees(tmp_path / "wsj_0001.mrg")


def test_check_trees_records_each_trees_line_and_words(tmp_path):
    write(tmp_path / "wsj_0001.mrg", TWO_TREES)
    scanned = treebank.check_trees(tmp_path / "wsj_0001.mrg")
    assert [(t.line, t.words) for t in scanned] == [(1, ["Mr.", "Vinken", "is", "chairman", "."]),
                                                   (6, ["He", "left", "."])]


def test_a_tree_nltk_reads_differently_is_an_error_not_a_silent_change(tmp_path, monkeypatch):
    # stands for a normalisation of a future nltk that check_trees does not know: the words are compared
    normalize = BracketParseCorpusReader._normalize
    monkeypatch.setattr(BracketParseCorpusReader, "_normalize",
                        lambda self, t: normalize(self, t).replace("(PRP He)", "(PRP She)"))
    write(tmp_path / "wsj_0001.mrg", TWO_TREES)
    with pytest.raises(UserError, match=r"wsj_0001\.mrg:6: nltk read this tree's words as \['She'"):
        treebank.read_trees(tmp_path, ["wsj_0001.mrg"])


def test_every_sample_file_passes_the_checks(ptb_sample):
    trees = treebank.read_split(ptb_sample, "0001-0179", "flat", "train_files")
    assert len(trees) == 3396 + 273  # the train and dev splits, nothing dropped


# ---------------------------------------------------------------- symlinks


def test_a_data_dir_of_symlinks_to_another_folder_is_read(tmp_path):
    write(tmp_path / "store" / "wsj_0001.mrg", TWO_TREES)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wsj_0001.mrg").symlink_to(tmp_path / "store" / "wsj_0001.mrg")
    trees = treebank.read_split(tmp_path / "data", "0001", "flat", "train_files")
    assert [t.leaves() for t in trees] == [["Mr.", "Vinken", "is", "chairman", "."], ["He", "left", "."]]
    assert len(PtbTask(PtbSettings(train_files="0001")).examples("train", tmp_path / "data")) == 2


def test_a_symlinked_file_keeps_its_line_numbers_in_errors(tmp_path):
    write(tmp_path / "store" / "real.mrg", TWO_TREES.replace("(PRP He)", "(PRP)"))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wsj_0001.mrg").symlink_to(tmp_path / "store" / "real.mrg")
    with pytest.raises(UserError, match=r"data/wsj_0001\.mrg:7: \(PRP\) holds no word"):
        treebank.read_split(tmp_path / "data", "0001", "flat", "train_files")


def test_a_dangling_symlink_is_a_user_error_not_a_gap(tmp_path):
    write(tmp_path / "data" / "wsj_0001.mrg", TWO_TREES)
    (tmp_path / "data" / "wsj_0002.mrg").symlink_to(tmp_path / "gone.mrg")
    with pytest.raises(UserError, match=r"wsj_0002\.mrg: a symlink to .*gone\.mrg, which does not exist"):
        treebank.split_files(tmp_path / "data", "0001-0002", "flat", "train_files")


def test_an_nltk_refusal_is_one_user_error_naming_file_and_target(tmp_path, monkeypatch):
    def refuse(root, fileids, **kwargs):
        raise ValueError(f"Security Violation [CorpusReader]: Path {root}/{fileids[0]} escapes root /x")

    write(tmp_path / "store" / "wsj_0001.mrg", TWO_TREES)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wsj_0001.mrg").symlink_to(tmp_path / "store" / "wsj_0001.mrg")
    monkeypatch.setattr(treebank, "BracketParseCorpusReader", refuse)
    with pytest.raises(UserError, match=r"data/wsj_0001\.mrg \(resolved to .*store/wsj_0001\.mrg\): nltk refuses "
                                        r"to read it .*; copy the file into data_dir"):
        treebank.read_trees(tmp_path / "data", ["wsj_0001.mrg"])
