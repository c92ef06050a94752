"""Downloading, resuming, verifying, unpacking and test-set extraction, all offline against a local server."""

import gzip
import hashlib
import io
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from seqxduce_translation import download, multi30k, wmt14
from seqxduce_translation.download import Source, extract_segments, fetch, gunzip, unpack
from seqxduce_translation.settings import TranslationSettings

from seqxduce.api import UserError

PAYLOAD = bytes(range(256)) * 4  # 1024 bytes


class Server:
    """A tiny HTTP server: serves `files`, honours Range unless told not to, and can cut a reply short."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.cut_after: int | None = None  # bytes sent before the next reply is cut off (once)
        self.ignore_range = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                range_header = self.headers.get("Range")
                if range_header and not server.ignore_range:
                    start = int(range_header.split("=")[1].split("-")[0])
                    if start >= len(data):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if server.cut_after is not None:
                    body, server.cut_after = body[: server.cut_after], None
                    self.close_connection = True
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    s.files["/data.bin"] = PAYLOAD
    try:
        yield s
    finally:
        s.close()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_download_verifies_and_second_call_is_a_cache_hit(server, tmp_path):
    source = Source(server.url + "/data.bin", "data.bin", sha256=sha256(PAYLOAD), size=len(PAYLOAD))
    path = fetch(source, tmp_path / "dl")
    assert path.read_bytes() == PAYLOAD and not (tmp_path / "dl" / "data.bin.part").exists()
    assert fetch(source, tmp_path / "dl") == path
    assert len(server.requests) == 1


def test_interrupted_download_keeps_part_and_resumes_with_range(server, tmp_path):
    source = Source(server.url + "/data.bin", "data.bin", sha256=sha256(PAYLOAD))
    server.cut_after = 300
    with pytest.raises(UserError, match="run again to resume"):
        fetch(source, tmp_path, retries=1)
    assert not (tmp_path / "data.bin").exists()
    assert (tmp_path / "data.bin.part").read_bytes() == PAYLOAD[:300]
    assert fetch(source, tmp_path).read_bytes() == PAYLOAD
    assert server.requests[-1] == ("/data.bin", "bytes=300-")


def test_retry_within_one_call_resumes(server, tmp_path):
    server.cut_after = 100
    path = fetch(Source(server.url + "/data.bin", "data.bin", md5=hashlib.md5(PAYLOAD).hexdigest()), tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert [r for _, r in server.requests] == [None, "bytes=100-"]


def test_server_ignoring_range_restarts_cleanly(server, tmp_path):
    (tmp_path / "data.bin.part").write_bytes(b"stale bytes from another file")
    server.ignore_range = True
    assert fetch(Source(server.url + "/data.bin", "data.bin"), tmp_path).read_bytes() == PAYLOAD


def test_part_longer_than_the_file_restarts(server, tmp_path):
    (tmp_path / "data.bin.part").write_bytes(b"x" * 2000)
    assert fetch(Source(server.url + "/data.bin", "data.bin"), tmp_path).read_bytes() == PAYLOAD


def test_checksum_mismatch_deletes_the_file(server, tmp_path):
    with pytest.raises(UserError, match="sha256 .*expected 00"):
        fetch(Source(server.url + "/data.bin", "data.bin", sha256="00" * 32), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_size_mismatch_deletes_the_file(server, tmp_path):
    with pytest.raises(UserError, match="size 1024 bytes, expected 1000"):
        fetch(Source(server.url + "/data.bin", "data.bin", size=1000), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_http_error_is_a_user_error(server, tmp_path):
    with pytest.raises(UserError, match="HTTP 404"):
        fetch(Source(server.url + "/missing.tgz", "missing.tgz"), tmp_path)
    assert len(server.requests) == 1  # a definite answer is not retried


def test_file_url(tmp_path):
    (tmp_path / "src.bin").write_bytes(PAYLOAD)
    path = fetch(Source((tmp_path / "src.bin").as_uri(), "copy.bin", sha256=sha256(PAYLOAD)), tmp_path / "dl")
    assert path.read_bytes() == PAYLOAD


def make_tgz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpack_tgz_and_zip(tmp_path):
    tgz = make_tgz(tmp_path / "a.tgz", {"training/x.en": b"hello\n", "y.de": b"hallo\n"})
    out = unpack(tgz, tmp_path / "a")
    assert (out / "training" / "x.en").read_bytes() == b"hello\n" and (out / "y.de").is_file()
    with zipfile.ZipFile(tmp_path / "b.zip", "w") as zf:
        zf.writestr("dir/z.fr", "bonjour\n")
    assert (unpack(tmp_path / "b.zip", tmp_path / "b") / "dir" / "z.fr").read_text() == "bonjour\n"


def test_unpack_corrupt_archive_leaves_nothing(tmp_path):
    good = make_tgz(tmp_path / "good.tgz", {"x.en": b"hello\n" * 1000}).read_bytes()
    (tmp_path / "bad.tgz").write_bytes(good[: len(good) // 2])
    (tmp_path / "bad.partial").mkdir()  # left by an earlier interrupted unpack
    with pytest.raises(UserError, match="cannot unpack"):
        unpack(tmp_path / "bad.tgz", tmp_path / "bad")
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad.partial").exists()


def test_unpack_keeps_an_existing_folder(tmp_path):
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "marker").write_text("kept")
    unpack(tmp_path / "not-even-there.tgz", tmp_path / "done")
    assert (tmp_path / "done" / "marker").read_text() == "kept"


def test_gunzip(tmp_path):
    (tmp_path / "t.en.gz").write_bytes(gzip.compress(b"a b\nc\n"))
    assert gunzip(tmp_path / "t.en.gz", tmp_path / "t.en").read_text() == "a b\nc\n"
    (tmp_path / "bad.gz").write_bytes(b"not gzip")
    with pytest.raises(UserError, match="cannot decompress"):
        gunzip(tmp_path / "bad.gz", tmp_path / "bad")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.gz", "t.en", "t.en.gz"]  # no half-written file


SGM = """<srcset setid="newstest2014" srclang="any">
<doc sysid="ref" docid="1012-bbc" genrefrom="" origlang="en">
<p>
<seg id="1">Gutach:  Noch mehr Sicherheit für Fußgänger </seg>
<seg id="2">R&amp;D 5 < 6</seg>
</p>
</doc>
</srcset>
"""


def test_extract_segments_from_sgm_and_xml(tmp_path):
    (tmp_path / "t.sgm").write_text(SGM, encoding="utf-8")
    out = extract_segments(tmp_path / "t.sgm", tmp_path / "t.de")
    # WMT's "fake SGML" is not entity-escaped: kept as written, whitespace collapsed like sacrebleu does
    assert out.read_text(encoding="utf-8") == "Gutach: Noch mehr Sicherheit für Fußgänger\nR&amp;D 5 < 6\n"
    (tmp_path / "t.xml").write_text(SGM, encoding="utf-8")
    assert extract_segments(tmp_path / "t.xml", tmp_path / "x.de").read_text().splitlines()[1] == "R&D 5 < 6"
    (tmp_path / "empty.sgm").write_text("<doc>\n</doc>\n")
    with pytest.raises(UserError, match="no <seg> lines"):
        extract_segments(tmp_path / "empty.sgm", tmp_path / "e.de")


# ---------------------------------------------------------------- whole data sets, offline


def sgm(lines: list[str]) -> bytes:
    segs = "".join(f'<seg id="{i}">{line}</seg>\n' for i, line in enumerate(lines, 1))
    return f'<srcset>\n<doc docid="d">\n{segs}</doc>\n</srcset>\n'.encode()


def test_wmt14_en_de_builds_from_archives_and_sacrebleu_test_sets(server, tmp_path, monkeypatch):
    tgz = {}
    tgz["euro"] = make_tgz(tmp_path / "e.tgz", {"training/europarl-v7.de-en.en": b"house\nred cat\n",
                                                "training/europarl-v7.de-en.de": b"Haus\nrote Katze\n"})
    tgz["cc"] = make_tgz(tmp_path / "c.tgz", {"commoncrawl.de-en.en": b"dog", "commoncrawl.de-en.de": b"Hund"})
    tgz["nc"] = make_tgz(tmp_path / "n.tgz", {"training/news-commentary-v9.de-en.en": b"one\n",
                                              "training/news-commentary-v9.de-en.de": b"eins\n"})
    tgz["dev"] = make_tgz(tmp_path / "d.tgz", {"test/newstest2013-src.en.sgm": sgm(["a dev line"]),
                                               "test/newstest2013-src.de.sgm": sgm(["eine Zeile"])})
    tgz["test"] = make_tgz(tmp_path / "t.tgz", {"test-full/newstest2014-deen-src.en.sgm": sgm(["x", "y"]),
                                                "test-full/newstest2014-deen-ref.de.sgm": sgm(["X", "Y"])})
    for key, path in tgz.items():
        server.files[f"/{key}.tgz"] = path.read_bytes()
    for key, name in (("euro", "europarl"), ("cc", "commoncrawl"), ("nc", "news-commentary")):
        corpus = wmt14.CORPORA[name]
        monkeypatch.setitem(wmt14.CORPORA, name, wmt14.Corpus(
            name, Source(f"{server.url}/{key}.tgz", corpus.archive.filename), corpus.stem))
    import sacrebleu.dataset

    md5 = hashlib.md5(tgz["test"].read_bytes()).hexdigest()
    monkeypatch.setitem(sacrebleu.dataset.DATASETS, "wmt13", SimpleNamespace(
        data=[f"{server.url}/dev.tgz"], md5=None,
        langpairs={"en-de": ["test/newstest2013-src.en.sgm", "test/newstest2013-src.de.sgm"]}))
    monkeypatch.setitem(sacrebleu.dataset.DATASETS, "wmt14/full", SimpleNamespace(
        data=[f"{server.url}/test.tgz"], md5=[md5],
        langpairs={"en-de": ["test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm"]}))

    from seqxduce_translation.task import TranslationTask

    task = TranslationTask(TranslationSettings(dataset="wmt14", src_lang="en", tgt_lang="de"))
    data = tmp_path / "data"
    train = task.examples("train", data)
    assert [(e.source, e.target) for e in train] == [("house", "Haus"), ("red cat", "rote Katze"),
                                                     ("dog", "Hund"), ("one", "eins")]
    assert [(e.source, e.ref) for e in task.examples("valid", data)] == [("a dev line", "eine Zeile")]
    assert [(e.source, e.ref) for e in task.examples("test", data)] == [("x", "X"), ("y", "Y")]
    assert (data / "wmt14.en-de" / "wmt14_full.de").read_text() == "X\nY\n"
    count = len(server.requests)
    TranslationTask(TranslationSettings(dataset="wmt14", src_lang="en", tgt_lang="de")).prepare(data)
    assert len(server.requests) == count == 5  # each archive once; a second run downloads nothing


def test_wmt14_rejects_other_pairs_and_corpora():
    with pytest.raises(UserError, match="en-de, de-en, en-fr and fr-en"):
        wmt14.Wmt14(TranslationSettings(dataset="wmt14", src_lang="de", tgt_lang="fr"))
    with pytest.raises(UserError, match="'giga' is not a WMT14 de-en corpus"):
        wmt14.Wmt14(TranslationSettings(dataset="wmt14", corpora=["giga"]))


def test_wmt14_missing_data_without_download_is_a_user_error(tmp_path):
    task = wmt14.Wmt14(TranslationSettings(dataset="wmt14", download=False))
    with pytest.raises(UserError, match="download = false"):
        task.prepare(tmp_path)


def test_multi30k_downloads_gz_files_and_checks_line_counts(server, tmp_path, monkeypatch):
    monkeypatch.setattr(multi30k, "BASE_URL", server.url + "/raw")
    monkeypatch.setattr(multi30k, "EXPECTED_LINES", {"train": 2, "val": 1, "test_2016_flickr": 1})
    texts = {"train.en": "a dog\na cat\n", "train.de": "ein Hund\neine Katze\n", "val.en": "hi\n", "val.de": "hallo\n",
             "test_2016_flickr.en": "one\n", "test_2016_flickr.de": "eins\n"}
    for name, text in texts.items():
        server.files[f"/raw/{name}.gz"] = gzip.compress(text.encode())
    dataset = multi30k.Multi30k(TranslationSettings(dataset="multi30k"))
    dataset.prepare(tmp_path)
    for name, text in texts.items():
        assert (tmp_path / name).read_text() == text
    dataset.prepare(tmp_path)
    assert len(server.requests) == 6

    server.files["/raw/val.de.gz"] = gzip.compress(b"hallo\nzwei\n")
    other = tmp_path / "other"
    with pytest.raises(UserError, match="2 lines, expected 1; both files were deleted"):
        dataset.prepare(other)
    assert not (other / "val.de").exists() and not (other / "downloads" / "multi30k.val.de.gz").exists()


def test_multi30k_plain_files_present_means_no_download(tmp_path, monkeypatch):
    monkeypatch.setattr(download, "_default_opener", lambda: pytest.fail("no download expected"))
    for name in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            (tmp_path / f"{name}.{lang}").write_text("x\n")
    multi30k.Multi30k(TranslationSettings(dataset="multi30k")).prepare(tmp_path)


def test_multi30k_rejects_unknown_language_and_test_set():
    with pytest.raises(UserError, match="tgt_lang = 'ja'"):
        multi30k.Multi30k(TranslationSettings(dataset="multi30k", tgt_lang="ja"))
    with pytest.raises(UserError, match="test_set = 'test_2099'"):
        multi30k.Multi30k(TranslationSettings(dataset="multi30k", test_set="test_2099"))
