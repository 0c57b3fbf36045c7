"""scripts/get_data.py (make data) against an archive of simple-examples.tgz's layout, built here and served
from 127.0.0.1: the tests never reach the internet."""
import hashlib
import http.server
import io
import os
import socket
import subprocess
import sys
import tarfile
import threading

import pytest

from harness import data

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = {"train": " the cat sat on the mat \n the dog sat \n" * 50, "valid": " the cat sat \n", "test": " a dog \n"}


def md5(content):
    return hashlib.md5(content).hexdigest()


def archive_of(texts):
    """A tar.gz laid out as simple-examples.tgz: ./simple-examples/data/ptb.<split>.txt among other files."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        files = {f"./simple-examples/data/ptb.{split}.txt": text for split, text in texts.items()}
        files["./simple-examples/README"] = "not one of the three\n"
        for name, text in files.items():
            content = text.encode()
            member = tarfile.TarInfo(name)
            member.size = len(content)
            archive.addfile(member, io.BytesIO(content))
    return buffer.getvalue()


ARCHIVE = archive_of(TEXTS)
CHECKSUMS = "--checksums=" + ",".join(f"{split}:{md5(text.encode())}" for split, text in TEXTS.items())


class Handler(http.server.BaseHTTPRequestHandler):
    """Serves server.body at any path; server.status other than 200 sends that error instead, and
    server.extra_length announces that many bytes more than it sends (a download cut short)."""

    def do_GET(self):
        self.server.requests += 1
        if self.server.status != 200:
            self.send_error(self.server.status)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.server.body) + self.server.extra_length))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.body, httpd.status, httpd.extra_length, httpd.requests = ARCHIVE, 200, 0, 0
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}/simple-examples.tgz"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def get_data(tmp_path, url, *flags):
    """Runs the script in tmp_path with --out_dir=data/ptb, as `make data` does."""
    return subprocess.run([sys.executable, os.path.join(REPO, "scripts", "get_data.py"), f"--url={url}",
                           "--out_dir=data/ptb", "--timeout=10", *flags], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)


def nothing_left(tmp_path):
    """No data/ptb, and no temporary beside it."""
    return not os.path.exists(tmp_path / "data") or os.listdir(tmp_path / "data") == []


def test_fetches_checks_and_unpacks(server, tmp_path):
    result = get_data(tmp_path, server.url, CHECKSUMS, f"--archive_md5={md5(ARCHIVE)}")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert sorted(os.listdir(tmp_path / "data" / "ptb")) == ["ptb.test.txt", "ptb.train.txt", "ptb.valid.txt"]
    for split, text in TEXTS.items():
        assert (tmp_path / "data" / "ptb" / f"ptb.{split}.txt").read_text() == text
    assert os.listdir(tmp_path / "data") == ["ptb"]  # the downloaded archive is gone
    assert "make verify DATA=data/ptb" in result.stdout.splitlines()[-1]
    # What --data_path reads: the directory's ptb.train.txt.
    tokens = data.text_tokens(str(tmp_path / "data" / "ptb"), vocab_size=10)
    assert len(tokens) == len(TEXTS["train"].replace("\n", " <eos> ").split())


def test_already_present_is_not_downloaded_again(server, tmp_path):
    assert get_data(tmp_path, server.url, CHECKSUMS, f"--archive_md5={md5(ARCHIVE)}").returncode == 0
    result = get_data(tmp_path, server.url, CHECKSUMS, f"--archive_md5={md5(ARCHIVE)}")
    assert result.returncode == 0, result.stderr
    assert "already" in result.stdout
    assert server.requests == 1


def test_a_directory_with_other_files_is_left_alone(server, tmp_path, assert_usage_error):
    (tmp_path / "data" / "ptb").mkdir(parents=True)
    (tmp_path / "data" / "ptb" / "ptb.train.txt").write_text("something else\n")
    assert_usage_error(get_data(tmp_path, server.url, CHECKSUMS), "data/ptb exists")
    assert server.requests == 0
    assert os.listdir(tmp_path / "data" / "ptb") == ["ptb.train.txt"]


def test_corrupt_archive(server, tmp_path, assert_usage_error):
    server.body = b"not a gzip file at all" * 100
    assert_usage_error(get_data(tmp_path, server.url, CHECKSUMS, "--archive_md5="), "cannot read the archive")
    assert nothing_left(tmp_path)


def test_download_cut_short(server, tmp_path, assert_usage_error):
    server.extra_length = 1000  # the server announces more than it sends, then closes the connection
    assert_usage_error(get_data(tmp_path, server.url, CHECKSUMS, "--archive_md5="), "cut short")
    assert nothing_left(tmp_path)


def test_archive_cut_short(server, tmp_path, assert_usage_error):
    server.body = ARCHIVE[:len(ARCHIVE) // 2]  # a complete download of half an archive
    assert_usage_error(get_data(tmp_path, server.url, CHECKSUMS, "--archive_md5="), "cannot read the archive")
    assert nothing_left(tmp_path)


def test_missing_member(server, tmp_path, assert_usage_error):
    server.body = archive_of({split: TEXTS[split] for split in ("train", "valid")})
    assert_usage_error(get_data(tmp_path, server.url, CHECKSUMS, "--archive_md5="),
                       "no simple-examples/data/ptb.test.txt")
    assert nothing_left(tmp_path)


def test_file_checksum_mismatch(server, tmp_path, assert_usage_error):
    wrong = CHECKSUMS.replace(md5(TEXTS["valid"].encode()), "0" * 32)
    assert_usage_error(get_data(tmp_path, server.url, wrong, f"--archive_md5={md5(ARCHIVE)}"),
                       "ptb.valid.txt", "expected " + "0" * 32)
    assert nothing_left(tmp_path)


def test_archive_checksum_mismatch(server, tmp_path, assert_usage_error):
    # Without --archive_md5 the archive must be the published simple-examples.tgz, which this one is not.
    assert_usage_error(get_data(tmp_path, server.url, CHECKSUMS), "has MD5", "expected")
    assert nothing_left(tmp_path)


def test_http_error(server, tmp_path, assert_usage_error):
    server.status = 404
    assert_usage_error(get_data(tmp_path, server.url, CHECKSUMS), "HTTP 404")
    assert nothing_left(tmp_path)


def test_unreachable(tmp_path, assert_usage_error):
    with socket.socket() as probe:  # a port of 127.0.0.1 where nothing listens once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert_usage_error(get_data(tmp_path, f"http://127.0.0.1:{port}/simple-examples.tgz", CHECKSUMS),
                       "cannot download")
    assert nothing_left(tmp_path)


def test_bad_flag_is_one_line(tmp_path, assert_usage_error):
    assert_usage_error(get_data(tmp_path, "http://127.0.0.1:9/", "--checksums=train:xyz"), "--checksums")
    assert nothing_left(tmp_path)
